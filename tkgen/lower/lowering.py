"""Stage 3: lower one variant's stage program to the naive kernel IR (tkgen/ir/kernel.py).

Every value of the program becomes a tile buffer over its axes and every output a `Store` of encoded
values. Each program step lowers itself (`Step.lower`, in the stage's module under tkgen/lower/stages/): this
class holds what the stages share, the buffers, the reads of tensor elements (views, packed codes), the
semantic guards and the stores, once, for the reference and every target. Nothing here knows a target: the
module holds each axis whole in one block, which is what the reference runs, and the schedule
(tkgen/schedule/pipeline.py) rewrites it into kernels. The only guards are the semantic ones: rows of a partial row
block, rows left out by keep_rows, positions outside the tensor they address.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional

from ..spec import expr as E
from ..spec import formats as F
from ..ir import prim as ir, kernel as kir
from ..spec import pyexpr as P
from ..ir.prim import F32, I32, I64, RAW, U32, op
from ..spec.checks import admitted_sizes
from ..spec.signature import INT_ELEMS, TensorSig, signature
from .stages import StageError, typecheck
from .stages import neutral, topk_key

# names the printers generate (loop, block and size variables, kernel symbols): a value named like one
# gets a `v_` prefix
_GENERATED = re.compile(r"^(?:[ibBNnr]_|pid$|kernel$|T_?$|bid$|blocks$|threads$)")
def _add(a, b):
    return op("add", a, b)


def _mul(a, b):
    return op("mul", a, b)


class Lowering:
    """Builds the naive module of one variant."""

    def __init__(self, catalog, spec, variant, program):
        self.catalog, self.variant, self.program = catalog, variant, program
        self.spec = spec.resolved(variant)
        self.sigs: Dict[str, TensorSig] = signature(catalog, spec, variant)
        self.body: List[kir.Stmt] = []
        self.bufs: Dict[str, kir.Buffer] = {}
        self.axes: Dict[str, kir.Axis] = {n: kir.Axis(n, a.extent) for n, a in spec.axes.items()}
        self.dyn_axis = next(iter(spec.axes)) if spec.dynamic_dim else None
        self.row_inner = spec.row_inner
        self.keep: Optional[ir.Expr] = None          # the kept-rows condition, once computed
        self.zero_filled = set()                     # buffers that hold 0 wherever a row guard was false
        self.checks: List[tuple] = []
        self.helpers = set()
        self.stored_in_loop = set()                  # outputs a stage stored itself (top-k, round by round)
        self.row_carries: List[str] = []             # carried sums of prefixes along the rows

    # -- buffers and indices ----------------------------------------------------------------------------
    def buffer(self, value, dtype=None, elem=None, scope="tile") -> kir.Buffer:
        """The tile buffer of a value (made on first use)."""
        if value.name not in self.bufs:
            name = value.name + "_tile" if value.name in self.spec.tensors else value.name
            if _GENERATED.match(name):
                name = "v_" + name
            self.bufs[value.name] = kir.Buffer(name, value.axes, dtype or value.dtype, scope, elem=elem)
        return self.bufs[value.name]

    def shared_copy(self, value, axis) -> kir.Buffer:
        """A copy of a value's tile that every thread can read (shared memory on CUDA), for stages that read
        it along `axis` at indices other threads hold; made once per value."""
        key = f"{value.name}@{axis}"         # not a value name
        if key not in self.bufs:
            src = self.bufs[value.name]
            self.bufs[key] = kir.Buffer(f"{src.name}_by_{axis}", src.axes, src.dtype, "shared")
            self.emit(kir.Compute(self.bufs[key], ir.Read(src.name, src.dtype)))
        return self.bufs[key]

    def read(self, value) -> ir.Read:
        b = self.bufs[value.name]
        return ir.Read(b.name, b.dtype)

    def group_index(self, group, fixed) -> ir.Expr:
        """The index of a tensor dim split over `group` (major first); `fixed` pins axes (a take)."""
        idx = None
        for a in group:
            part = ir.i32(fixed[a]) if a in fixed else ir.Index(a)
            if idx is None or idx == ir.i32(0):
                idx = part
            else:
                idx = _add(_mul(idx, ir.extent(a)), part)
        return idx

    def logical(self, sig: TensorSig, fixed=(), segment=None) -> tuple:
        """The logical indices of the tensor's element at the current indices of its view; for a segment,
        its segmented dim at the segment's offset plus the index of the segment's own axes."""
        fixed = dict(fixed)
        if segment is None:
            return tuple(self.group_index(g, fixed) for g in sig.view)
        dim, parts = sig.segments
        names = [n for n, _ in parts]
        offset = None
        for _, group in parts[:names.index(segment)]:
            offset = _add(offset, self.extent(group)) if offset is not None else self.extent(group)
        inner = self.group_index(dict(parts)[segment], fixed) or ir.i32(0)
        at = inner if offset is None else _add(offset, inner)
        return tuple(at if i == dim else self.group_index(g, fixed) for i, g in enumerate(sig.view))

    @staticmethod
    def extent(group) -> ir.Expr:
        """The number of indices of a group of axes (1 for none)."""
        out = ir.i32(1)
        for a in group:
            out = ir.extent(a) if out == ir.i32(1) else _mul(out, ir.extent(a))
        return out

    def check_segments(self, sig: TensorSig):
        """The factory checks that the segments of a dim add up to its size."""
        dim, parts = sig.segments
        total = None
        for _, group in parts:
            size = E.Num(1)
            for a in group:
                size = P.mul(size, E.Name(ir.extent_name(a))) if size != E.Num(1) else E.Name(ir.extent_name(a))
            total = size if total is None else E.Binary("+", total, size)
        check = (E.Binary("==", total, sig.shape[dim]),
                 f"{sig.name}: its segments {', '.join(n for n, _ in parts)} must fill dim {dim} exactly")
        if check not in self.checks:
            self.checks.append(check)

    @staticmethod
    def storage(sig: TensorSig, logical) -> tuple:
        """Storage indices from logical ones: a column-major layout stores [cols, rows]."""
        return tuple(reversed(logical)) if sig.col_pad else tuple(logical)

    def view(self, sig: TensorSig, fixed=()) -> tuple:
        """The axis groups of the storage dims, for ir.Fetch and kir.Store: an axis, or (axis, index) for an
        axis pinned to an index."""
        fixed = dict(fixed)
        return self.storage(sig, tuple(tuple((a, fixed[a]) if a in fixed else a for a in g) for g in sig.view))

    def row_guard(self, axes, sig: Optional[TensorSig] = None) -> Optional[ir.Expr]:
        """The semantic guard of an element over `axes`: its row lies inside the tensor (a partial row
        block), and it is a kept row (keep_rows)."""
        conds = []
        if self.row_inner and self.row_inner in axes and self.dyn_axis in axes:
            row = _add(_mul(ir.Index(self.dyn_axis), ir.extent(self.row_inner)), ir.Index(self.row_inner))
            conds.append(op("lt", row, ir.Size(P.sym(self.spec.dynamic_dim))))
        if self.keep is not None and self.dyn_axis in axes and not self.row_inner:
            conds.append(self.keep)
        return ir.conj(*conds)

    def at_rows(self, sig: TensorSig, pos: ir.Expr, fixed=None) -> tuple:
        """The indices of the current element of a tensor addressed by rows at positions: the position,
        then the dims after the first through the tensor's view of them (`fixed` pins axes: a take)."""
        return (pos,) + tuple(self.group_index(g, fixed or {}) for g in sig.row_view)

    @staticmethod
    def inside(pos: ir.Expr, size: str) -> tuple:
        """The conditions under which an index (i32 or i64) lies in [0, size) (`n_<tensor>`: a tensor
        addressed at positions, `N_<axis>`: an axis)."""
        n = ir.Size(size)
        return op("ge", pos, ir.Const(0, pos.dtype)), op("lt", pos, n if pos.dtype == I32 else op("to_i64", n))

    def emit(self, st):
        self.body.append(kir.map_exprs([st], ir.fold)[0])

    # -- expressions ------------------------------------------------------------------------------------
    def convert(self, e: ir.Expr) -> ir.Expr:
        """A program expression in kernel IR terms: values become buffer reads, `#axis` the axis index,
        params and dims used as values scalars, `ROUND_x` the round trip through x's dtype."""
        def fn(n):
            if isinstance(n, ir.Var):
                if n.name.startswith("#"):
                    return ir.Index(n.name[1:])
                if n.name in self.program.scalars:
                    return ir.Scalar(P.sym(n.name), n.dtype)
                if n.name in self.bufs:
                    return ir.Read(self.bufs[n.name].name, self.bufs[n.name].dtype)
                raise KeyError(f"value {n.name!r} is not computed yet")
            if isinstance(n, ir.Call) and n.fn.startswith("ROUND_"):
                elem = "@" + n.fn[len("ROUND_"):]
                return ir.Decode(elem, ir.Encode(elem, n.args[0]), F32)
            if isinstance(n, ir.Call) and n.fn.startswith("round_"):
                fmt = n.fn[len("round_"):]
                code_dtype = U32 if self.catalog.elements[fmt].pack else RAW
                return ir.Decode(fmt, ir.Encode(fmt, n.args[0], code_dtype), F32)
            return None
        return ir.rebuild(e, fn)

    def decoded(self, sig: TensorSig, fixed, axes, segment=None) -> ir.Expr:
        """The value of the tensor's element at the current indices (its view, `fixed` axes pinned, or one
        segment of it)."""
        logical = self.logical(sig, fixed, segment)
        guard = self.row_guard(axes)
        if sig.packing is not None:
            code = self.packed_code(sig, logical, guard)
            if sig.fmt is not None:
                # the code goes to a u32 tile first: the decoder reads its argument several times, and
                # should repeat a register read, not the unpacking (TVM took a minute to lower an e5m6
                # decode of an unpacked window)
                tile = kir.Buffer(f"{sig.name}_code" + "".join(f"_{a}{i}" for a, i in fixed), axes, U32)
                self.emit(kir.Compute(tile, code))
                return ir.Decode(sig.fmt.name, ir.Read(tile.name, U32), F32)
            return op("from_bits", op("shl", code, ir.u32(23)))       # a UE8M0 byte: 2^(byte - 127)
        # a segment is read at computed indices (the reference gathers it), a view through its reshape
        view = None if segment is not None else self.view(sig, fixed)
        fetch = ir.Fetch(sig.name, self.storage(sig, logical), guard, view=view)
        if sig.scale is not None and sig.scale.store == "exponent_byte":
            return op("from_bits", op("shl", ir.Decode("uint8", fetch, U32), ir.u32(23)))
        if sig.elem in INT_ELEMS:
            return ir.Decode(sig.elem, fetch, I64 if sig.elem == "int64" else I32)
        if sig.multi and all(dt in INT_ELEMS for dt in sig.dtypes):
            return ir.Decode(sig.elem, fetch, I32)      # int32 or int64 at the call: carried as int32
        return ir.Decode(sig.elem, fetch, F32)

    def packed_code(self, sig: TensorSig, logical, guard) -> ir.Expr:
        """The u32 code of the current element of a packed tensor. Its bit offset in the packet is linear in
        its index j within the packet; it is read from the word holding its lowest bit and, where it
        crosses into the next one, that word too. Two loads and a few integer operations, rather than a
        select over the packet's codes, which TVM lowers slowly."""
        pk = sig.packing
        *outer, e = logical
        n, wb, width = pk.codes, pk.word_bits, pk.width

        def word(k):
            at = tuple(outer) + (_add(_mul(op("floordiv", e, ir.i32(n)), ir.i32(pk.words)), k),)
            return ir.Decode(pk.word, ir.Fetch(sig.name, at, guard), U32)
        j = op("floormod", e, ir.i32(n))
        off = _mul(j, ir.i32(width)) if pk.order == "lsb_first" else \
            op("sub", ir.i32(pk.total - width), _mul(j, ir.i32(width)))
        mask = ir.u32((1 << width) - 1)
        if pk.words == 1:
            return op("bitand", op("shr", word(ir.i32(0)), op("i32_to_u32", off)), mask)
        low = op("floordiv", off, ir.i32(wb))              # the word of the lowest bit, from the packet's lsb
        if pk.order == "lsb_first":
            k_lo, k_hi = low, op("min", _add(low, ir.i32(1)), ir.i32(pk.words - 1))
        else:
            k_lo = op("sub", ir.i32(pk.words - 1), low)
            k_hi = op("sub", op("max", k_lo, ir.i32(1)), ir.i32(1))
        r = op("floormod", off, ir.i32(wb))
        lo = op("shr", word(k_lo), op("i32_to_u32", r))
        # the bits above the low word: shifted by wb - r in two steps, each in [0, 31]
        hi = op("shl", op("shl", word(k_hi), op("i32_to_u32", op("sub", ir.i32(wb - 1), r))), ir.u32(1))
        crosses = op("gt", _add(r, ir.i32(width)), ir.i32(wb))
        return op("bitand", op("bitor", lo, op("select", crosses, hi, ir.u32(0))), mask)

    # -- outputs ----------------------------------------------------------------------------------------
    def store(self, tname, value):
        sig = self.sigs[tname]
        v = self.read(value)
        accumulate = tname in self.program.accumulated(self.dyn_axis)
        guard = self.row_guard(value.axes)
        if value.dtype == RAW:
            enc = v
        elif sig.scale is not None:
            if sig.scale.store == "float":
                enc = ir.Encode("float32", v)
            else:
                enc = F.exponent_byte(v)
                if sig.packing is None:
                    enc = ir.Encode("uint8", enc)
        elif sig.fmt is not None and sig.packing is not None:
            enc = ir.Encode(sig.fmt.name, v, U32)
        else:
            enc = ir.Encode(sig.elem, v)
        if sig.at:
            pos = self.read(self.program.values[self.program.at[tname]])
            guard = ir.conj(guard, *self.inside(pos, f"n_{tname}"))
            if sig.flat:       # added into zeros, or stored over the fill or into an input (distinct positions)
                self.emit(kir.Store(tname, (pos,), enc, value.axes, guard, accumulate=not sig.stored_at))
            else:         # whole rows, scattered into zeros: distinct positions, so a plain store
                self.emit(kir.Store(tname, self.at_rows(sig, pos), enc, value.axes, guard))
        elif sig.packing is not None:
            self.store_packed(sig, value, enc, guard)
        else:
            self.emit(kir.Store(tname, self.storage(sig, self.logical(sig)), enc, value.axes, guard, accumulate,
                                view=self.view(sig)))

    def store_packed(self, sig: TensorSig, value, code, guard):
        """Pack `codes` consecutive codes along the tensor's innermost axis into `words` words.

        The codes go to a buffer that threads share (a word gathers codes that other threads computed),
        then each packet of the innermost axis is assembled and stored; codes past the axis's extent (a
        last, partial packet) are zero. The packet axis is tiled with the axis it packs."""
        pk = sig.packing
        axis, n = sig.view[-1][-1], pk.codes
        codes = kir.Buffer(f"{sig.name}_codes", value.axes, U32, scope="shared")
        self.emit(kir.Compute(codes, code))
        p = f"{axis}_p"
        self.axes[p] = kir.Axis(p, P.ceildiv(E.Name(ir.extent_name(axis)), E.Num(n)), packets=(axis, n))
        group = sig.view[-1]
        packet = ir.Index(p)
        if len(group) > 1:
            outer = self.group_index(group[:-1], {})
            packet = _add(_mul(outer, ir.extent(p)), packet)
            self.checks.append((E.Binary("==", E.Binary("%", E.Name(ir.extent_name(axis)), E.Num(n)), E.Num(0)),
                                f"{sig.name}: {n} codes share a word, so they must not straddle axis {axis}"))
        axes = tuple(p if a == axis else a for a in value.axes)
        local = {a: ir.Index(a, local=True) for a in value.axes if a != axis}
        logical = self.logical(sig)
        for k in range(pk.words):
            terms = None
            for j, r, bits, sh in pk.word_pieces(k):
                inner = _add(_mul(ir.Index(p, local=True), ir.i32(n)), ir.i32(j))
                at = tuple(inner if a == axis else local[a] for a in value.axes)
                valid = op("lt", _add(_mul(ir.Index(p), ir.i32(n)), ir.i32(j)), ir.extent(axis))
                term = ir.Read(codes.name, U32, at, guard=valid)
                if r:
                    term = op("shr", term, ir.u32(r))
                if r + bits < pk.width:
                    term = op("bitand", term, ir.u32((1 << bits) - 1))
                term = op("shl", term, ir.u32(sh))
                terms = term if terms is None else op("bitor", terms, term)
            word_index = _add(_mul(packet, ir.i32(pk.words)), ir.i32(k)) if pk.words > 1 else packet
            idx = logical[:-1] + (word_index,)
            self.emit(kir.Store(sig.name, self.storage(sig, idx), ir.Encode(pk.word, terms), axes, guard))

    # -- the module -------------------------------------------------------------------------------------
    def tensor_args(self):
        out = []
        for name, sig in self.sigs.items():
            if not sig.present:
                continue
            if sig.flat:
                out.append(kir.TensorArg(name, sig.role, sig.elem, (E.Name(f"n_{name}"),), flat=True))
                continue
            if sig.at:           # rows at positions: as many rows as the call gives
                out.append(kir.TensorArg(name, sig.role, sig.elem, (E.Name(f"n_{name}"),) + tuple(sig.shape[1:])))
                continue
            shape = list(sig.shape)
            if sig.packing is not None:
                codes, _ = sig.packet()
                words = sig.packing.words if sig.fmt is not None else 1
                shape[-1] = P.mul(P.ceildiv(shape[-1], E.Num(codes)), E.Num(words))
            if sig.col_pad:
                shape = [shape[1], P.mul(P.ceildiv(shape[0], E.Num(sig.col_pad)), E.Num(sig.col_pad))]
            elem = sig.packing.word if sig.packing is not None else sig.elem
            strides = None
            if sig.strides_of:
                strides = tuple(E.Name(n) for n in stride_names(sig.strides_of, len(shape))) + (E.Num(1),)
            out.append(kir.TensorArg(name, sig.role, elem, tuple(shape), scale=sig.scale is not None,
                                     strides=strides))
        return tuple(out)

    def build(self) -> kir.Module:
        p = self.program
        stored = {}
        for tname, v in p.outputs.items():
            stored.setdefault(v.name, []).append(tname)
        for st in p.steps:
            try:
                st.lower(self)
            except (TypeError, KeyError, ValueError) as e:
                raise StageError(st.stage_index if st.stage_index >= 0 else len(self.spec.stages) - 1, str(e)) from None
            for tname in stored.get(st.out.name, ()):
                if tname not in self.stored_in_loop:
                    self.store(tname, st.out)
        spec = self.spec
        dims = tuple(P.sym(d.name) for d in spec.dims.values() if not d.dynamic) + \
            tuple(P.sym(x.name) for x in spec.static_params)
        dtype_args = tuple(n for n, s in self.sigs.items() if s.role == "input" and s.multi and not s.like)
        dynamic = ((P.sym(spec.dynamic_dim),) if spec.dynamic_dim else ()) + \
            tuple(f"n_{n}" for n, s in self.sigs.items() if s.at and s.present) + \
            tuple(x for n, s in self.sigs.items() if s.strides_of == n and s.present
                  for x in stride_names(n, len(s.shape)))
        keep = self.bufs[p.keep.name].name if p.keep is not None else None
        sizes = tuple((P.sym(n), e) for n, e in p.sizes.items())
        dtypes = {n: s.dtypes for n, s in self.sigs.items() if s.role == "input" and s.multi and not s.like}
        for n, e in p.sizes.items():
            for d in _divisors(e):
                self.checks.append((E.Binary("!=", d, E.Num(0)), f"{n} divides by {E.to_source(d)}, which is 0"))
        return kir.Module(spec.name, spec.variant_name(self.variant), self.axes_with_facts(), self.tensor_args(),
                          (kir.Kernel("main", tuple(self.body)),), dims, dtype_args, dynamic, tuple(self.checks),
                          keep=keep, dyn=self.dyn_axis, row_inner=self.row_inner, samples=size_samples(spec),
                          row_carries=tuple(self.row_carries),
                          scalar_args=tuple((P.sym(x.name), ir.I32) for x in spec.runtime_params),
                          helpers=frozenset(self.helpers),
                          sigs=self.sigs, dtypes=dtypes, sizes=sizes)

    def axes_with_facts(self) -> Dict[str, kir.Axis]:
        """The axes with what the schedule needs to know of the program (kir.Axis), so that no pass reads
        the spec or the stage program."""
        p, spec = self.program, self.spec
        used = p.used_axes
        counted = {a for n in p.counts for a in p.values[n].axes}
        inner = set()
        for t in spec.tensors.values():
            for group in t.resolved({}).view:
                inner.update([a for a in group if a in used][1:])   # an axis held at a fixed index is not the major
        read_along = {a for t in spec.inputs.values() for group in t.resolved({}).view for a in group}
        out = {}
        for name, ax in self.axes.items():
            if ax.packets:
                out[name] = ax
                continue
            extent = spec.axes[name].extent
            param = spec.params.get(extent.id) if isinstance(extent, E.Name) else None
            high = param.range[1] if param is not None and param.range is not None else None
            out[name] = dataclasses.replace(ax, used=name in used, whole=name in p.whole_axes, counted=name in counted,
                                            view_inner=name in inner, read_along=name in read_along,
                                            extent_max=high.value if isinstance(high, E.Num) else None)
        return out


_SAMPLES: Dict[tuple, kir.SizeSamples] = {}


def size_samples(spec) -> kir.SizeSamples:
    """The sizes a spec admits (kir.SizeSamples), computed once per spec text."""
    key = (spec.name, spec.sha256)
    if key not in _SAMPLES:
        def each(at_max):
            return tuple(tuple(sorted(s.items())) for s in admitted_sizes(spec, at_max))
        _SAMPLES[key] = kir.SizeSamples(each(False), each(True), spec.dynamic_dim,
                                        frozenset(d.name for d in spec.dims.values() if d.max is None))
    return _SAMPLES[key]


def stride_names(tensor: str, rank: int):
    """The runtime sizes holding a strided tensor's strides, all dims but the last (which is 1)."""
    return tuple(f"S_{tensor}_{i}" for i in range(rank - 1))


def _divisors(e):
    """The divisors of the `//` and `%` in a size expression."""
    if isinstance(e, E.Binary):
        return ([e.rhs] if e.op in ("//", "%") else []) + _divisors(e.lhs) + _divisors(e.rhs)
    return _divisors(e.arg) if isinstance(e, E.Unary) else []


def lower_program(catalog, spec, variant, program) -> kir.Module:
    return Lowering(catalog, spec, variant, program).build()


def lower_variants(catalog, spec):
    """(variant, program, naive kernel-IR module) of every variant of an op, each lowered once: what
    `generate` and `validate` schedule and print. A stage the lowering refuses is an error at its line."""
    return typecheck(spec, catalog.elements, catalog.scales,
                     lambda variant, program: lower_program(catalog, spec, variant, program))
