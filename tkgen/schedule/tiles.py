"""Tiles: how each axis of a kernel is held (whole, padded to a power of two, split across blocks) and the
factory's knobs (`threads`, `block_<axis>`, `tile_elems`); passes `plan_tiles` and `replan_tiles`.

The budget `tile_elems` bounds the largest tile the kernel holds; `replan_tiles` sizes the blocks again
once the rewrites before it have dropped tiles (only block sizes change, not how axes are held).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Set

from ..ir import kernel as kir
from ..ir import prim as ir
from ..spec import expr as E
from ..spec import pyexpr as P
from .gemm import gemm_tiles
from .passes import register
from .stream import stream_tiles

KNOB_BLOCK = "block_{}"
GEMM_K_STEP = 8           # elements of K in a TF32 tensor-core step: streamed chunks are multiples of it

def _pack_multiple(module, axis) -> int:
    return max([a.packets[1] for a in module.axes.values() if a.packets and a.packets[0] == axis] or [1])


def _product(axes) -> E.Node:
    out = E.Name(ir.block_name(axes[0]))
    for a in axes[1:]:
        out = P.mul(out, E.Name(ir.block_name(a)))
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


def _replicates_row_work(module, name, groups, whole) -> bool:
    """Whether splitting axis `name` across blocks would make each of them redo a row's reduction: an axis
    that no input is read along (only outputs vary over it), beside a tile over the rows and a reduced (or
    top-k'd) axis that does not vary over it (the top-k of a gate, split by its output slots, ran five
    times per row). Such an axis is held whole where the tile budget allows."""
    dyn = module.dyn
    return dyn is not None and not module.axes[name].read_along and \
        any(dyn in g and name not in g and set(g) & set(whole) for g in groups)


def _declared_past_threads(axis: kir.Axis, threads) -> bool:
    """Whether the axis's extent is a param whose declared range reaches past the block's threads.
    TileLang 0.1.15 lays out no fragment of more elements than threads that is not a multiple of them
    ("no available layout found": a histogram over 513 or 1023 experts), so on profiles that pad
    (`pad_reduced`) such an axis held whole is padded to a power of two like a reduced one."""
    return axis.extent_max is not None and axis.extent_max > threads


def plan_tiles(module: kir.Module, arch, sched, groups=None):
    """(tiles in sizing order, knobs, checks). Whole axes (reduced, top-k'd, inner parts of a split tensor
    dim, counted, `all`) are sized first, then the rows, then axes with explicit sizes, and last `auto`
    axes, which grow to the tile budget. The budget bounds the largest tile that holds an axis (`groups`:
    the axes of each tile; by default those of the module's first kernel)."""
    if groups is None:
        groups = held_groups(module.kernels[0].body)
    block = dict(sched.get("block", {}))
    knobs = [("threads", sched.get("threads", arch.threads))]
    checks = []
    dyn = module.dyn
    kinds = {}
    for name, ax in module.axes.items():
        if ax.packets or not ax.used:
            continue            # packets are tiled with their axis; an axis only indexed at a fixed position
                                # (`take`) has no tile extent and no loop
        want = block.get(name, 1 if name == dyn else "auto")
        if name == dyn:
            kinds[name] = ("dyn", want if isinstance(want, int) else 1)
        elif ax.whole or ax.view_inner or want == "all" or ax.counted:
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
            n_ = E.Name(ir.extent_name(name))
            if kind == "whole":
                padded = arch.pad_reduced and (module.axes[name].whole or
                                               _declared_past_threads(module.axes[name], knobs[0][1]))
                # warp reductions want a power-of-two extent; the padding is never loaded or stored
                tiles.append((name, kir.Tile(P.call("pad_pow2", n_) if padded else n_, False, padded)))
                continue
            split.append(name)
            if kind in ("dyn", "fixed"):
                knobs.append((KNOB_BLOCK.format(name), size))
                block_size = E.Name(KNOB_BLOCK.format(name))
                if kind == "dyn" and auto and whole:
                    # rows that the tile budget holds: a row's whole axes may fill it alone
                    pack = _pack_multiple(module, name)
                    block_size = P.call("fit_rows", block_size, E.Name("tile_elems"),
                                        _budget_share(name, whole, groups), *([E.Num(pack)] if pack > 1 else []))
                tiles.append((name, kir.Tile(block_size, True)))
                if kind == "fixed":
                    checks.append((E.Binary("==", E.Binary("%", n_, E.Name(ir.block_name(name))), E.Num(0)),
                                   f"block size of axis {name} must divide its extent"))
            else:
                sized = [o for o, (k, _) in kinds.items() if o != name and
                         (k != "auto" or order.index(o) < order.index(name))]
                others = _budget_share(name, sized, groups)
                cap = P.call("max", E.Num(1), E.Binary("//", E.Name("tile_elems"), others))
                whole_fits = _replicates_row_work(module, name, groups, [a for a, x in module.axes.items() if x.whole])
                tiles.append((name, kir.Tile(P.call("pick_block", n_, cap, E.Num(_pack_multiple(module, name)),
                                                    *([E.Num(1)] if whole_fits else [])), True, whole_fits)))
    if len(split) > 3:
        raise ValueError(f"{module.op}: at most three axes can be split across blocks, not {split}")
    if any(k == "auto" for k, _ in kinds.values()):
        knobs.append(("tile_elems", sched.get("tile_elems", arch.tile_elems)))
    for name, ax in module.axes.items():          # packets are tiled with the axis they pack
        if ax.packets:
            base, n = ax.packets
            t = dict(tiles)[base]
            # a padded axis pads its packets too: the packets past the last real one must not be stored
            tiles.append((name, kir.Tile(P.ceildiv(E.Name(ir.block_name(base)), E.Num(n)), t.split, t.padded)))
    return tiles, knobs, checks


def target_tiles(module, arch, sched, groups=None):
    """plan_tiles, then the streamed axes (`stream:`) and, where T.gemm runs, its padded result axes."""
    tiles, knobs, checks = plan_tiles(module, arch, sched, groups)
    gemm_target = arch.tile_memory == "fragment"
    tiles, chunks = stream_tiles(tiles, sched.get("stream", {}), GEMM_K_STEP if gemm_target else 1)
    if gemm_target:
        tiles, more = gemm_tiles(tiles, module.kernels[0].body, GEMM_K_STEP)
        checks = checks + more
    return tiles, knobs + chunks, checks



def _set_tiles(module, ctx, groups=None, tile_elems=None):
    sched = ctx.sched if tile_elems is None else {**ctx.sched, "tile_elems": tile_elems}
    tiles, knobs, checks = target_tiles(ctx.naive, ctx.arch, sched, groups)
    kernel = dataclasses.replace(module.kernels[0], tiles=tuple(tiles))
    return module.replace(kernels=(kernel,) + module.kernels[1:], knobs=tuple(knobs),
                          checks=ctx.naive.checks + tuple(checks))


@register("plan_tiles")
def plan_pass(module: kir.Module, ctx, tile_elems: Optional[int] = None) -> kir.Module:
    """How each axis is held (whole, padded, split, streamed) and the factory's knobs, for the naive
    module's tiles: Kernel.tiles, the module's knobs and checks. `tile_elems`: the tile budget's default
    (else the schedule's, else the profile's)."""
    return _set_tiles(module, ctx, tile_elems=tile_elems)


@register("replan_tiles")
def replan_pass(module: kir.Module, ctx, tile_elems: Optional[int] = None) -> kir.Module:
    """Where the rewrites before dropped tiles (a fold that reads its elements in the loop), the blocks
    sized again for the tiles that are left (`tile_elems` as for plan_tiles)."""
    groups = held_groups(module.kernels[0].body)
    if groups == held_groups(ctx.naive.kernels[0].body):
        return module
    return _set_tiles(module, ctx, groups, tile_elems)
