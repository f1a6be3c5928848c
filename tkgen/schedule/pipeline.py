"""Schedules: the data that says how a naive kernel-IR module runs on a target, and the rewrites that apply it.

A schedule is resolved in layers, each overriding the one before (`resolve`): the profile's `threads`, the
spec's `default` block, the spec's block for the arch, then the profile's `tuned[<op>]` written by `tkgen
tune`. The rewrites, in the order `apply` runs them:

1. `plan_tiles`: how each axis is held (whole, padded to a power of two, split across blocks) and the
   factory's knobs (`threads`, `block_<axis>`, `tile_elems`); the budget `tile_elems` bounds the largest
   tile the kernel holds, sized again once the rewrites below have dropped tiles;
2. `guard_out_of_range`: where a tile reaches past its axis (the rows of a last partial block, padding),
   tensors are neither read nor written, and what a reduction over that axis reads there is its neutral
   value;
3. `mask_nan_reductions`: on targets whose max does not skip NaN, max-type reductions read a copy with
   NaNs replaced by the neutral value;
4. `stage_transposed_stores`: a store whose innermost storage dim is not the tile's innermost axis goes
   through shared memory, so that consecutive threads write consecutive addresses;
5. `inline_stored`: a computed value that is only stored is computed where it is stored; then
   `read_fold_sources` (tkgen/schedule/fold_sources.py): an ordered fold of a value that is a function of loads
   computes each element where it is added, instead of reading a staged copy of the whole tile;
6. `stream_body` (tkgen/schedule/stream.py), for the axes of `stream:`: the statements over such an axis run in a
   loop over its chunks, reductions and matmuls over it carried; then the tile matmuls (tkgen/schedule/gemm.py):
   `place_gemm` where fragments exist (T.gemm), `expand_gemm` (the ordered loop) elsewhere;
   `go_persistent` (tkgen/schedule/persistent.py), where the schedule says `persistent: true`: a fixed number of
   blocks loop over the row tiles, and sums over the rows are added per block, then in block order;
7. `fuse`: consecutive elementwise statements over the same axes share one loop (loads keep their own,
   which TileLang then vectorizes to 16 bytes);
8. `coalesce_widening_loads` (CUDA): a load of elements narrower than what is stored over the same axes is
   laid out for the store (`vector_bytes` of the stored type per thread), where the tile is within its
   budget (`tile_elems`); `unroll_fetching_loops` (CUDA): a fold that reads tensors at its step is unrolled.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Set

from ..spec import expr as E
from ..ir import prim as ir, kernel as kir
from ..spec import pyexpr as P
from ..ir.prim import F32, op
from ..lower.lowering import neutral
from .fold_sources import read_fold_sources, unroll_fetching_loops
from .gemm import expand_gemm, gemm_tiles, place_gemm
from .padding_rows import zero_padding_rows
from .persistent import BLOCKS, go_persistent
from ..spec.signature import is_native, storage
from .stream import stream_body, stream_tiles
from .tile_bytes import check_tile_bytes

KNOB_BLOCK = "block_{}"
GEMM_K_STEP = 8           # elements of K in a TF32 tensor-core step: streamed chunks are multiples of it


def resolve(spec, arch) -> dict:
    """Profile defaults, then the spec's default schedule, then its block for this arch, then tuned data."""
    sched = {"threads": arch.threads}
    for layer in (spec.schedule.get("default", {}), spec.schedule.get(arch.name, {}),
                  arch.tuned.get(spec.name, {})):
        for k, v in layer.items():
            sched[k] = {**sched.get(k, {}), **v} if isinstance(v, dict) else v
    return sched


# -- 1. tiles ---------------------------------------------------------------------------------------------
def _view_inner_axes(spec, used) -> set:
    """Axes that are not the major axis of a split tensor dim must be whole (their index is not tiled)."""
    inner = set()
    for t in spec.tensors.values():
        for group in t.resolved({}).view:
            live = [a for a in group if a in used]     # an axis held at a fixed index is not the major
            inner.update(live[1:])
    return inner


def _pack_multiple(module, axis) -> int:
    return max([a.packets[1] for a in module.axes.values() if a.packets and a.packets[0] == axis] or [1])


def _product(axes) -> E.Node:
    out = E.Name(f"B_{axes[0]}")
    for a in axes[1:]:
        out = P.mul(out, E.Name(f"B_{a}"))
    return out


def held_groups(body) -> Set[tuple]:
    """The axes of every tile a kernel holds (its buffers, and the loops of its stores)."""
    groups = {b.axes for b in kir.buffers(body).values()}
    return groups | {tuple(st.axes) for st in kir.statements(body) if isinstance(st, kir.Store)}


def _budget_share(name, sized, groups) -> E.Node:
    """What the tiles holding `name` hold of the axes sized before it: the largest such product over the
    tiles (not the product of every axis: a [t, e] tile and a [t, s] tile do not make a [t, e, s] one).
    A set of axes contained in another's is dropped (its product is not larger)."""
    sets = {tuple(o for o in sized if o in g and o != name) for g in groups if name in g} or {tuple(sized)}
    sets = [s for s in sets if s and not any(set(s) < set(t) for t in sets)]
    products = [_product(list(s)) for s in sorted(sets, key=lambda s: [sized.index(o) for o in s])]
    if not products:
        return E.Num(1)
    return products[0] if len(products) == 1 else P.call("max", *products)


def _replicates_row_work(name, spec, dyn, groups, whole) -> bool:
    """Whether splitting axis `name` across blocks would make each of them redo a row's reduction: an axis
    that no input is read along (only outputs vary over it), beside a tile over the rows and a reduced (or
    top-k'd) axis that does not vary over it (the top-k of a gate, split by its output slots, ran five
    times per row). Such an axis is held whole where the tile budget allows."""
    read_along = {a for t in spec.inputs.values() for group in t.resolved({}).view for a in group}
    return dyn is not None and name not in read_along and \
        any(dyn in g and name not in g and set(g) & set(whole) for g in groups)


def _declared_past_threads(spec, name, threads) -> bool:
    """Whether axis `name`'s extent is a param whose declared range reaches past the block's threads.
    TileLang 0.1.15 lays out no fragment of more elements than threads that is not a multiple of them
    ("no available layout found": a histogram over 513 or 1023 experts), so on profiles that pad
    (`pad_reduced`) such an axis held whole is padded to a power of two like a reduced one."""
    extent = spec.axes[name].extent
    param = spec.params.get(extent.id) if isinstance(extent, E.Name) else None
    high = param.range[1] if param is not None and param.range is not None else None
    return isinstance(high, E.Num) and high.value > threads


def plan_tiles(module: kir.Module, spec, program, arch, sched, groups=None):
    """(tiles in sizing order, knobs, checks). Whole axes (reduced, top-k'd, inner parts of a split tensor
    dim, counted, `all`) are sized first, then the rows, then axes with explicit sizes, and last `auto`
    axes, which grow to the tile budget. The budget bounds the largest tile that holds an axis (`groups`:
    the axes of each tile; by default those of the module's first kernel)."""
    if groups is None:
        groups = held_groups(module.kernels[0].body)
    block = dict(sched.get("block", {}))
    knobs = [("threads", sched.get("threads", arch.threads))]
    checks = []
    used = program.used_axes
    dyn = next(iter(spec.axes)) if spec.dynamic_dim else None
    counted = {a for n in program.counts for a in program.values[n].axes}
    inner = _view_inner_axes(spec, used)
    kinds = {}
    for name in spec.axes:
        if name not in used:
            continue            # only indexed at a fixed position (`take`): no tile extent, no loop
        want = block.get(name, 1 if name == dyn else "auto")
        if name == dyn:
            kinds[name] = ("dyn", want if isinstance(want, int) else 1)
        elif name in program.whole_axes or name in inner or want == "all" or name in counted:
            kinds[name] = ("whole", None)
        else:
            kinds[name] = ("auto", None) if want == "auto" else ("fixed", want)
    tiles, split = [], []
    order = list(kinds)
    auto = any(k == "auto" for k, _ in kinds.values())
    whole = [n for n, (k, _) in kinds.items() if k == "whole"]
    for rank in ("whole", "dyn", "fixed", "auto"):
        for name, (kind, size) in kinds.items():
            if kind != rank:
                continue
            n_ = E.Name(f"N_{name}")
            if kind == "whole":
                padded = arch.pad_reduced and (name in program.whole_axes or
                                               _declared_past_threads(spec, name, knobs[0][1]))
                # warp reductions want a power-of-two extent; the padding is never loaded or stored
                tiles.append((name, kir.Tile(P.call("pad_pow2", n_) if padded else n_, False, padded)))
                continue
            split.append(name)
            if kind in ("dyn", "fixed"):
                knobs.append((KNOB_BLOCK.format(name), size))
                block_size = E.Name(KNOB_BLOCK.format(name))
                if kind == "dyn" and auto and whole:
                    # rows that the tile budget holds: a row's whole axes may fill it alone
                    block_size = P.call("fit_rows", block_size, E.Name("tile_elems"),
                                        _budget_share(name, whole, groups))
                tiles.append((name, kir.Tile(block_size, True)))
                if kind == "fixed":
                    checks.append((E.Binary("==", E.Binary("%", n_, E.Name(f"B_{name}")), E.Num(0)),
                                   f"block size of axis {name} must divide its extent"))
            else:
                sized = [o for o, (k, _) in kinds.items() if o != name and
                         (k != "auto" or order.index(o) < order.index(name))]
                others = _budget_share(name, sized, groups)
                cap = P.call("max", E.Num(1), E.Binary("//", E.Name("tile_elems"), others))
                whole_fits = _replicates_row_work(name, spec, dyn, groups, program.whole_axes)
                tiles.append((name, kir.Tile(P.call("pick_block", n_, cap, E.Num(_pack_multiple(module, name)),
                                                    *([E.Num(1)] if whole_fits else [])), True, whole_fits)))
    if len(split) > 3:
        raise ValueError(f"{spec.name}: at most three axes can be split across blocks, not {split}")
    if any(k == "auto" for k, _ in kinds.values()):
        knobs.append(("tile_elems", sched.get("tile_elems", arch.tile_elems)))
    for name, ax in module.axes.items():          # packets are tiled with the axis they pack
        if ax.packets:
            base, n = ax.packets
            t = dict(tiles)[base]
            # a padded axis pads its packets too: the packets past the last real one must not be stored
            tiles.append((name, kir.Tile(P.ceildiv(E.Name(f"B_{base}"), E.Num(n)), t.split, t.padded)))
    return tiles, knobs, checks


# -- 2. out of range --------------------------------------------------------------------------------------
def axes_of(e: ir.Expr, bufs: Dict[str, kir.Buffer]) -> Set[str]:
    """The axes an expression's value depends on: the indices it names and the axes of what it reads."""
    out = set()
    for n in ir.walk(e):
        if isinstance(n, ir.Index):
            out.add(n.axis)
        elif isinstance(n, ir.Read) and n.indices is None:
            out.update(bufs[n.buffer].axes)
    return out


def _in_range(axis, module):
    a = module.axes[axis]
    if a.packets:      # a packet lies in range when its first code does
        base, n = a.packets
        return op("lt", op("mul", ir.Index(axis), ir.i32(n)), ir.Size(f"N_{base}"))
    return op("lt", ir.Index(axis), ir.Size(f"N_{axis}"))


def guard_out_of_range(body, module: kir.Module, ranged: Set[str], covered: Dict[str, str]):
    """Guard tensor reads and writes at tile positions past an axis's extent (`ranged` axes), and make
    every buffer a reduction over such an axis reads hold the reduction's neutral value there.

    `covered`: axis -> an axis whose presence means a semantic guard already excludes those positions (the
    rows inside a row block: `b * N_r + r < T` also rules out blocks past the end)."""
    if not ranged:
        return list(body)
    bufs = kir.buffers(body)

    def conds(axes):
        return ir.conj(*[_in_range(a, module) for a in sorted(ranged, key=list(module.axes).index)
                         if a in axes and covered.get(a) not in axes])

    def guard_fetches(e):
        def fn(n):
            if isinstance(n, ir.Fetch):
                extra = conds(set().union(*[axes_of(i, bufs) for i in n.indices]))
                if extra is not None:
                    return dataclasses.replace(n, guard=ir.conj(n.guard, extra))
            return None
        return ir.rebuild(e, fn)

    def walk(stmts):
        out = []
        for st in stmts:
            if isinstance(st, kir.Compute):
                st = dataclasses.replace(st, value=guard_fetches(st.value))
            elif isinstance(st, kir.Store):
                st = dataclasses.replace(st, value=guard_fetches(st.value), guard=ir.conj(st.guard, conds(set(st.axes))))
            elif isinstance(st, kir.Loop):
                st = dataclasses.replace(st, body=tuple(walk(st.body)))
            out.append(st)
        return out
    body = walk(body)
    return _neutral_where_reduced(body, module, ranged, covered)


def _zero_outside(body, ranged) -> Set[str]:
    """Buffers that hold 0 wherever a ranged axis runs past its extent: guarded loads, and absmax or sum
    reductions of such buffers."""
    zero = set()
    for st in kir.statements(body):
        if isinstance(st, kir.Compute) and not st.at and isinstance(st.value, ir.Decode) and \
                isinstance(st.value.arg, ir.Fetch) and st.value.arg.guard is not None:
            zero.add(st.dst.name)
        elif isinstance(st, kir.Reduce) and st.kind in ("absmax", "sum") and st.src.name in zero:
            zero.add(st.dst.name)
    return zero


def _neutral_where_reduced(body, module, ranged, covered):
    """Each buffer that a reduction over a ranged axis reads: every Compute writing it takes the neutral
    value past the extent (a buffer reduced with two different neutral values, or written by a reduction,
    gets a masked copy per reduction instead)."""
    zero = _zero_outside(body, ranged)
    need: Dict[str, Dict[str, str]] = {}        # buffer -> {ranged axis: reduction kind}
    for st in kir.statements(body):
        if isinstance(st, kir.Reduce) and st.axis in ranged:
            if (st.kind in ("absmax", "sum") and st.src.name in zero) or st.src.pad_safe:
                continue
            need.setdefault(st.src.name, {})[st.axis] = st.kind
        elif isinstance(st, kir.Gemm) and st.k in ranged:        # a matmul adds its operands' products
            for b in (st.a, st.b):
                if b.name not in zero and not b.pad_safe:
                    need.setdefault(b.name, {})[st.k] = "sum"
    # a reduction of the same kind over another axis is neutral where its source is: the need moves to the
    # source (the ones of a count, reduced axis by axis, are masked once)
    producers = {st.dst.name: st for st in kir.statements(body) if isinstance(st, kir.Reduce)}
    moved = True
    while moved:
        moved = False
        for name in list(need):
            st, kinds = producers.get(name), set(need[name].values())
            if st is not None and kinds == {st.kind} and st.kind != "absmax" and st.src.name not in zero:
                need.setdefault(st.src.name, {}).update(need.pop(name))
                moved = True
    copies = {b for b, m in need.items() if len(set(m.values())) > 1 or b in producers}
    for st in kir.statements(body):
        if isinstance(st, kir.Gemm) and {st.a.name, st.b.name} & copies:
            raise ValueError(f"a matmul over padded axis {st.k!r} of a reduction's result (stream the axis instead)")

    def in_range(axes):
        return ir.conj(*[_in_range(a, module) for a in sorted(axes, key=list(module.axes).index)])

    def walk(stmts):
        out = []
        for st in stmts:
            if isinstance(st, kir.Compute) and st.dst.name in need and st.dst.name not in copies:
                kind = next(iter(need[st.dst.name].values()))
                st = dataclasses.replace(st, value=op("select", in_range(need[st.dst.name]), st.value,
                                                      neutral(kind, st.dst.dtype)))
            elif isinstance(st, kir.Reduce) and st.src.name in copies and st.axis in need[st.src.name]:
                masked = kir.Buffer(f"{st.src.name}_for_{st.kind}_over_{st.axis}", st.src.axes, st.src.dtype)
                out.append(kir.Compute(masked, op("select", _in_range(st.axis, module),
                                                  ir.Read(st.src.name, st.src.dtype), neutral(st.kind, st.src.dtype))))
                st = dataclasses.replace(st, src=masked)
            elif isinstance(st, kir.Loop):
                st = dataclasses.replace(st, body=tuple(walk(st.body)))
            out.append(st)
        return out
    return walk(body)


# -- 3. NaN in max reductions -----------------------------------------------------------------------------
def mask_nan_reductions(body):
    """Max-type float reductions read a copy with NaN replaced by the neutral value (the C target's max
    keeps whichever operand its comparison picks, so a NaN last in a row would win); every target then
    skips NaN, as the reference does."""
    out = []
    for st in body:
        if isinstance(st, kir.Reduce) and st.kind != "sum" and st.src.dtype == F32:
            masked = kir.Buffer(f"{st.src.name}_for_{st.kind}_over_{st.axis}", st.src.axes, F32)
            src = ir.Read(st.src.name, F32)
            out.append(kir.Compute(masked, op("select", op("isnan", src), neutral(st.kind, F32), src)))
            st = dataclasses.replace(st, src=masked)
        elif isinstance(st, kir.Loop):
            st = dataclasses.replace(st, body=tuple(mask_nan_reductions(st.body)))
        out.append(st)
    return out


# -- 4. transposed stores ---------------------------------------------------------------------------------
def _index_axes(e) -> List[str]:
    return [n.axis for n in ir.walk(e) if isinstance(n, ir.Index)]


def stage_transposed_stores(body, module: kir.Module):
    """A store whose innermost storage dim is not indexed by the tile's innermost axis (consecutive
    threads would write addresses a row apart) is staged in shared memory in the tile's own order, each
    row padded by 16 bytes, and a second loop over the tensor's order stores it."""
    out = []
    for st in body:
        t = module.tensor(st.tensor) if isinstance(st, kir.Store) else None
        if t is None or t.scale or t.flat or st.accumulate or not st.axes or \
                st.axes[-1] in _index_axes(st.indices[-1]):
            out.append(st)
            continue
        stage = kir.Buffer(f"{st.tensor}_staged", st.axes, ir.RAW, scope="shared", elem=t.elem, pad=16)
        order = []
        for i in st.indices:
            order += [a for a in _index_axes(i) if a not in order]
        order += [a for a in st.axes if a not in order]
        out.append(kir.Compute(stage, st.value))
        out.append(dataclasses.replace(st, value=ir.Read(stage.name, ir.RAW), axes=tuple(order)))
    return out


# -- 5. inlining ------------------------------------------------------------------------------------------
def inline_stored(body, keep=None):
    """A Compute whose buffer only Stores over the same axes read (and that reads no tensor) is computed
    in those stores."""
    readers: Dict[str, list] = {}
    writers: Dict[str, int] = {}
    for st in kir.statements(body):
        for e in kir.exprs(st):
            for n in ir.walk(e):
                if isinstance(n, ir.Read):
                    readers.setdefault(n.buffer, []).append((st, n.indices is None and n.guard is None))
        for f in ("dst",):
            b = getattr(st, f, None)
            if isinstance(b, kir.Buffer):
                writers[b.name] = writers.get(b.name, 0) + 1
        if isinstance(st, kir.Reduce):
            readers.setdefault(st.src.name, []).append((st, False))
    inlined = {}
    for st in body:
        if not isinstance(st, kir.Compute) or st.at or ir.fetches(st.value) or st.dst.name == keep or \
                writers.get(st.dst.name) != 1:
            continue
        rs = readers.get(st.dst.name, [])
        if rs and all(isinstance(r, kir.Store) and plain and tuple(r.axes) == st.dst.axes and r in body for r, plain in rs):
            inlined[st.dst.name] = st.value
    if not inlined:
        return list(body)

    def sub(e):
        return ir.rebuild(e, lambda n: inlined.get(n.buffer) if isinstance(n, ir.Read) and n.indices is None else None)
    out = []
    for st in body:
        if isinstance(st, kir.Compute) and st.dst.name in inlined:
            continue
        if isinstance(st, kir.Store):
            st = dataclasses.replace(st, value=sub(st.value))
        out.append(st)
    return out


# -- 6. loop fusion ---------------------------------------------------------------------------------------
def fuse(body, software=lambda elem: False):
    """Consecutive Computes and Stores over the same axes share one loop; a load (a Compute that reads a
    tensor) gets a loop of its own: TileLang then vectorizes it to 16 bytes on sm_90a (a loop that also
    loads or computes other tiles gets 8-byte accesses). A store does not join a loop that calls a codec
    (a generated helper with branches): TileLang then stores element by element (an e2m1 decode in the
    loop of an e4m3 store made its stores scalar, 2.2x slower on the H200)."""
    out, open_ = [], None

    def codec(n):
        return isinstance(n, ir.Call) or (isinstance(n, (ir.Decode, ir.Encode)) and software(n.elem))

    def calls_helper(nest):
        return any(isinstance(c, kir.Compute) and any(codec(n) for n in ir.walk(c.value)) for c in nest.body)
    for st in body:
        if isinstance(st, kir.Loop):
            out.append(dataclasses.replace(st, body=tuple(fuse(st.body, software))))
            open_ = None
            continue
        if not isinstance(st, (kir.Compute, kir.Store)) or (isinstance(st, kir.Compute) and st.at):
            out.append(st)
            open_ = None
            continue
        axes = tuple(st.axes)
        load = isinstance(st, kir.Compute) and bool(ir.fetches(st.value))
        if load or open_ is None or open_.axes != axes or (isinstance(st, kir.Store) and calls_helper(open_)):
            open_ = kir.Nest(axes, (st,))
            out.append(open_)
        else:
            open_ = kir.Nest(axes, open_.body + (st,))
            out[-1] = open_
        if load:
            open_ = None
    return out


def _software_codec(catalog, arch, elem) -> bool:
    """Whether values of element type `elem` go through a generated codec on `arch` (packed or not native)."""
    fmt = catalog.elements.get(elem)
    return fmt is not None and (fmt.pack is not None or not is_native(catalog, arch, elem))


# -- 8. widening loads ------------------------------------------------------------------------------------
def coalesce_widening_loads(body, module: kir.Module, catalog, arch):
    """A load of elements narrower than what the kernel stores over the same axes (FP8 codes dequantized to
    bf16) is laid out for the store: the knob `vector_bytes` of the stored type per thread (the Nest holds
    the stored element's size, so the printed kernel is the same for every vector width). Left to itself the load
    gives each thread 16 bytes of the narrow input, so each thread's share of the store spans 32 bytes or
    more and every store instruction of a warp writes every other 16 bytes."""
    from ..spec.formats import ITEMSIZE
    tensors = {t.name: t for t in module.tensors}

    def size(tensor):
        elem = tensors[tensor].elem
        return None if elem.startswith("@") else ITEMSIZE.get(storage(catalog, arch, elem))

    widest: Dict[tuple, int] = {}
    for st in kir.statements(body):
        if isinstance(st, kir.Store) and size(st.tensor):
            widest[st.axes] = max(widest.get(st.axes, 0), size(st.tensor))
    out = []
    for st in body:
        if isinstance(st, kir.Nest) and st.axes in widest:
            loads = [size(t) for c in st.body if isinstance(c, kir.Compute) for t in ir.fetches(c.value)]
            if loads and all(n and n < widest[st.axes] for n in loads):
                st = dataclasses.replace(st, vector=widest[st.axes])
        elif isinstance(st, kir.Loop):
            inner = coalesce_widening_loads(st.body, module, catalog, arch)
            st = dataclasses.replace(st, body=tuple(inner))
        out.append(st)
    return out


# -- the schedule -----------------------------------------------------------------------------------------
def _tiles(module, spec, program, arch, sched, groups=None):
    """plan_tiles, then the streamed axes (`stream:`) and, where T.gemm runs, its padded result axes."""
    tiles, knobs, checks = plan_tiles(module, spec, program, arch, sched, groups)
    gemm_target = arch.tile_memory == "fragment"
    tiles, chunks = stream_tiles(tiles, sched.get("stream", {}), GEMM_K_STEP if gemm_target else 1)
    if gemm_target:
        tiles, more = gemm_tiles(tiles, module.kernels[0].body, GEMM_K_STEP)
        checks = checks + more
    return tiles, knobs + chunks, checks


def _stream(body, sched, arch):
    kind, stages = ("pipelined", 2) if arch.loops == "parallel" else ("serial", 0)
    for axis in sched.get("stream", {}):
        body = stream_body(body, axis, kind, stages)
    return place_gemm(body) if arch.tile_memory == "fragment" else expand_gemm(body)


def apply(module: kir.Module, spec, program, catalog, arch, sched) -> kir.Module:
    """The module rewritten for `arch` under schedule `sched` (see the module docstring)."""
    tiles, knobs, checks = _tiles(module, spec, program, arch, sched)
    tile_of = dict(tiles)
    dyn = next(iter(spec.axes)) if spec.dynamic_dim else None
    ranged = {a for a, t in tiles if t.padded}
    if dyn in tile_of:
        ranged.add(dyn)
    covered = {dyn: spec.row_inner} if spec.row_inner else {}
    kernel = module.kernels[0]
    body = guard_out_of_range(kernel.body, module, ranged, covered)
    if not arch.max_skips_nan:
        body = mask_nan_reductions(body)
    body = stage_transposed_stores(body, module)
    body = inline_stored(body, module.keep)
    kernel = dataclasses.replace(kernel, body=tuple(body), tiles=tuple(tiles))
    kernel = dataclasses.replace(kernel, body=tuple(read_fold_sources(kernel.body, kernel)))
    groups = held_groups(kernel.body)
    if groups != held_groups(module.kernels[0].body):
        # the rewrites dropped tiles (a fold that reads its elements in the loop holds no tile over its
        # axis): size the blocks for the tiles that are left (only block sizes change, not how axes are held)
        tiles, knobs, checks = _tiles(module, spec, program, arch, sched, groups)
        kernel = dataclasses.replace(kernel, tiles=tuple(tiles))
    kernel = dataclasses.replace(kernel, body=tuple(_stream(kernel.body, sched, arch)))
    module = module.replace(kernels=(kernel,), knobs=tuple(knobs), checks=module.checks + tuple(checks))
    if sched.get("persistent"):
        module = go_persistent(module, kernel, dyn)
        module = module.replace(knobs=module.knobs + ((BLOCKS, sched.get("blocks", arch.persistent_blocks)),))
    module = zero_padding_rows(module)
    kernels = []
    for k in module.kernels:
        body = fuse(k.body, lambda elem: _software_codec(catalog, arch, elem))
        if arch.loops == "parallel":        # CUDA: thread layouts; the C target's loops are serial
            body = coalesce_widening_loads(body, module, catalog, arch)
            body = unroll_fetching_loops(body)
        kernels.append(dataclasses.replace(k, body=tuple(body)))
    module = module.replace(kernels=tuple(kernels))
    if any(isinstance(st, kir.Nest) and st.vector for k in kernels for st in kir.statements(k.body)):
        # the profile's vector width and tile budget are knobs, not constants: the printed kernel is then
        # the same on profiles that differ only in them (one kernel module, a knob table per profile)
        more = [("vector_bytes", sched.get("vector_bytes", arch.vector_bytes))]
        if "tile_elems" not in dict(module.knobs):
            more.append(("tile_elems", arch.tile_elems))
        module = module.replace(knobs=module.knobs + tuple(more))
    return check_tile_bytes(module, spec, catalog, arch)


def bank_pad_elems(catalog, arch, elem) -> int:
    from ..spec.formats import ITEMSIZE
    return 16 // ITEMSIZE[storage(catalog, arch, elem)]
