"""Reductions: `absmax`, `amax`, `amin`, `sum` of a value over one of its axes, the ordered `fold`, and
`prefix`, the exclusive running sum along an axis in order (a fold that keeps every partial result).

absmax, amax and amin are exact in any order (a zero result of a float max or min is +0.0, whichever zero
a reduction met first); `sum` is order-dependent. Over the rows (the dynamic axis), each block reduces its
own rows and adds that into the output, which starts at zero. `fold` sums or multiplies in a declared order
from a declared start value, one element after another, so kernel and reference agree bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...spec import expr as E
from ...ir import prim as ir, kernel as kir
from ...ir.prim import F32, I32, I64, op
from .base import Stage, Step, Value, stage

KINDS = {"absmax": "absmax", "amax": "max", "amin": "min", "sum": "sum"}
INT_REDUCTIONS = {"amax", "amin"}        # the reductions integer values take: exact in any order
_NEUTRAL = {"absmax": 0.0, "sum": 0.0, "max": float("-inf"), "min": float("inf")}
_BITS = {I32: 32, I64: 64}


def neutral(kind: str, dtype: str) -> ir.Const:
    """The value that leaves a reduction unchanged (what padding and masked elements must hold)."""
    if dtype in _BITS:
        top = 2 ** (_BITS[dtype] - 1)
        return ir.Const({"max": -top, "min": top - 1, "sum": 0}[kind], dtype)
    return ir.c(_NEUTRAL[kind])


class _OverSource:
    """A step that reads one value, `src`, once per element (reductions over one of its axes)."""

    def sources(self):
        return {self.src.name}

    def work(self, size, extent):
        return size(self.src.axes)


@dataclass(frozen=True)
class Reduce(_OverSource, Step):
    out: Value
    kind: str                  # absmax | max | min | sum
    src: Value
    axis: str

    def accumulates(self, dyn_axis):
        return self.axis == dyn_axis

    def lower(self, lw):
        """Over the rows inside row blocks (or over kept rows), elements outside the tensor hold the
        reduction's neutral value: loads already give 0, which serves absmax and sum of loaded data;
        anything else is reduced from a masked copy. A zero result of a float max or min is +0.0: which
        zero a reduction keeps depends on its order, and the canonical one does not."""
        src = lw.bufs[self.src.name]
        mask = None
        if self.axis == lw.row_inner:
            mask = lw.row_guard(src.axes)
        elif self.axis == lw.dyn_axis and lw.keep is not None:
            mask = lw.keep
        if mask is not None and not (self.kind in ("absmax", "sum") and self.src.name in lw.zero_filled):
            masked = kir.Buffer(f"{src.name}_for_{self.kind}_over_{self.axis}", src.axes, src.dtype)
            lw.emit(kir.Compute(masked, op("select", mask, ir.Read(src.name, src.dtype),
                                           neutral(self.kind, src.dtype))))
            src = masked
        dst = lw.buffer(self.out)
        lw.emit(kir.Reduce(dst, src, self.axis, self.kind))
        if self.kind in ("max", "min") and dst.dtype == F32:
            lw.emit(kir.Compute(dst, op("add", ir.Read(dst.name, F32), ir.c(0.0))))
        if self.kind in ("absmax", "sum") and self.src.name in lw.zero_filled:
            lw.zero_filled.add(self.out.name)


@stage(*KINDS, args=("value", "axis"))
class Reduction(Stage):
    def build(self, b, call, src, axis):
        idx, fn = call.index, call.fn
        if axis not in src.axes:
            b.fail(idx, f"{src.name!r} does not vary over axis {axis!r}", call.args[1])
        # integers add up over the rows (a count: each block adds its part, in any order the same bits)
        int_sum = fn == "sum" and axis == b.rows and src.dtype == I32
        if src.dtype != F32 and not (src.dtype in _BITS and fn in INT_REDUCTIONS) and not int_sum:
            b.fail(idx, f"{fn} needs float values" + (" (integers take amax and amin, and int32 a sum over the rows)"
                                                      if src.dtype in _BITS else ""), call.args[0])
        if axis == b.rows and fn != "sum":
            b.fail(idx, f"over the rows (axis {axis!r}) a reduction is a sum: blocks split the rows, and each adds "
                        "its part into the output", call.args[1])
        b.whole.add(axis)
        out = b.define(idx, call.targets[0], [a for a in src.axes if a != axis], src.dtype)
        if axis == b.rows:
            b.partials.add(out.name)
        b.add(idx, Reduce(out, KINDS[fn], src, axis))


# `and` and `or` are the expression language's boolean operators, so the bit folds are bitand and bitor
_FOLD_OPS = {"sum": "add", "prod": "mul", "fma": "fma", "xor": "bitxor", "bitand": "bitand", "bitor": "bitor"}
_BIT_FOLDS = ("xor", "bitand", "bitor")        # integer values only
_ORDERS = ("ascending", "descending")


@dataclass(frozen=True)
class Fold(Step):
    """An ordered fold: acc = start, then acc = acc + v[i] (or * v[i], or a bit operation of integers) for i
    along `axis` in order, one rounding per step: bit-exact with the reference, which runs the same loop."""

    out: Value
    kind: str                  # sum | prod | xor | bitand | bitor
    src: Value
    axis: str
    start: ir.Expr             # does not vary over `axis`
    descending: bool = False
    factor: Optional[Value] = None     # fma: acc = fma(v[i], factor[i], acc)

    def sources(self):
        return {self.src.name} | ir.var_names(self.start) | ({self.factor.name} if self.factor else set())

    def work(self, size, extent):
        return size(self.src.axes)

    def lower(self, lw):
        """The start value, then a serial loop over the axis. The value folded is read at the loop's index
        from a copy that every thread can read (shared memory on CUDA); rows of a row block that lie past
        the tensor are skipped."""
        src = lw.bufs[self.src.name]
        acc = lw.buffer(self.out)
        lw.emit(kir.Compute(acc, lw.convert(self.start)))
        step = ir.Var(f"r_{self.axis}", I32)
        at = op("sub", op("sub", ir.extent(self.axis), ir.i32(1)), step) if self.descending else step
        def element(value):
            staged = lw.shared_copy(value, self.axis)
            return ir.Read(staged.name, staged.dtype, tuple(at if a == self.axis else ir.Index(a, local=True)
                                                            for a in value.axes))
        if self.factor is not None:
            value = op("fma", element(self.src), element(self.factor), ir.Read(acc.name, acc.dtype))
        else:
            value = op(_FOLD_OPS[self.kind], ir.Read(acc.name, acc.dtype), element(self.src))
        guard = lw.row_guard(src.axes) if self.axis == lw.row_inner else None
        if guard is not None:
            guard = ir.rebuild(guard, lambda n: at if n == ir.Index(self.axis) else None)
            value = op("select", guard, value, ir.Read(acc.name, acc.dtype))
        lw.emit(kir.Loop(step.name, ir.extent(self.axis), (kir.Compute(acc, ir.fold(value)),)))


@stage("fold", args=("node", "value", "axis", "node", "node?"))
class FoldStage(Stage):
    """fold(sum | prod | xor | bitand | bitor, v, axis, start[, ascending | descending]), or
    fold(fma, v, axis, start, w): acc = fma(v[i], w[i], acc) in ascending order, one rounding per step."""

    def build(self, b, call, kind, src, axis, start, *order):
        idx = call.index
        if not isinstance(kind, E.Name) or kind.id not in _FOLD_OPS:
            b.fail(idx, f"fold: the operation is one of {', '.join(_FOLD_OPS)}", kind)
        factor = None
        if kind.id == "fma":
            if not order:
                b.fail(idx, "fold(fma, v, axis, start, w): w, the factor of each element, is missing", kind)
            factor = b.value_arg(idx, order[0])
            if factor.dtype != F32 or src.dtype != F32 or axis not in factor.axes:
                b.fail(idx, f"fold(fma, ...): v and w are f32 values varying over axis {axis!r}", order[0])
            order = ()
        if order and (not isinstance(order[0], E.Name) or order[0].id not in _ORDERS):
            b.fail(idx, f"fold: the order is {' or '.join(_ORDERS)}", order[0])
        if axis not in src.axes:
            b.fail(idx, f"{src.name!r} does not vary over axis {axis!r}", call.args[2])
        if src.dtype not in (F32, *_BITS):
            b.fail(idx, f"fold: folds numbers, found {src.dtype}", call.args[1])
        if kind.id in _BIT_FOLDS and src.dtype not in _BITS:
            b.fail(idx, f"fold: {kind.id} folds integers, found {src.dtype}", call.args[1])
        b.whole_axis(idx, axis, "fold", call.args[2])
        axes = set()
        first = b.operands(idx, (call.args[1], start), axes)[1]
        init = ir.fold(first)
        if axis in b.axes_of(init):
            b.fail(idx, f"fold: the start value must not vary over axis {axis!r}", start)
        if init.dtype != src.dtype:
            b.fail(idx, f"fold: the start value is {init.dtype}, the values folded {src.dtype}", start)
        axes_out = [a for a in src.axes if a != axis] + [a for a in (factor.axes if factor else ()) if a != axis]
        out = b.define(idx, call.targets[0], axes_out, src.dtype)
        b.add(idx, Fold(out, kind.id, src, axis, init, bool(order) and order[0].id == "descending", factor))


@dataclass(frozen=True)
class Prefix(Step):
    """The exclusive prefix sum along `axis` in ascending order: out[i] = v[0] + ... + v[i - 1], out[0] = 0;
    one addition (one rounding, for floats) per step, integers wrap: kernel and reference run the same loop."""

    out: Value
    src: Value
    axis: str

    def sources(self):
        return {self.src.name}

    def work(self, size, extent):
        return size(self.src.axes)

    def lower(self, lw):
        """A carried sum over the other axes and a serial loop over the axis: each step writes the slice of
        the result at its index, then adds the source's slice. The source is read from a copy every thread
        can read (shared memory on CUDA); rows of a row block past the tensor add nothing.

        The result is collected where every thread can write it (shared memory on CUDA): a fragment slice
        written at the loop's index takes its threads from the fragment's layout, and TileLang 0.1.15 then
        guards the write with `thread < (owner of the index) + 1`, not `==`, so every thread up to the
        owner overwrote its own elements with the running sum (the MoE mapping's chunk offsets and segment starts)."""
        src = lw.bufs[self.src.name]
        out = lw.buffer(self.out, scope="shared")
        rest = tuple(a for a in src.axes if a != self.axis)
        acc = kir.Buffer(f"{out.name}_run", rest, src.dtype)
        zero = ir.Const(0.0 if src.dtype == F32 else 0, src.dtype)
        staged = lw.shared_copy(self.src, self.axis)
        step = ir.Var(f"r_{self.axis}", I32)
        element = ir.Read(staged.name, staged.dtype, tuple(step if a == self.axis else ir.Index(a, local=True)
                                                           for a in src.axes))
        guard = lw.row_guard(src.axes) if self.axis == lw.row_inner else None
        if guard is not None:
            guard = ir.rebuild(guard, lambda n: step if n == ir.Index(self.axis) else None)
            element = op("select", guard, element, zero)
        lw.emit(kir.Fill(acc, zero))
        body = (kir.Compute(out, ir.Read(acc.name, acc.dtype), at=((self.axis, step),)),
                kir.Compute(acc, ir.fold(op("add", ir.Read(acc.name, acc.dtype), element))))
        lw.emit(kir.Loop(step.name, ir.extent(self.axis), body))
        if self.axis == lw.dyn_axis:
            # along the rows: the loop runs over the whole axis here (the reference); a schedule that splits
            # the rows into blocks carries `acc` from the blocks before (tkgen/schedule/row_scans.py)
            lw.row_carries.append(acc.name)


@stage("prefix", args=("value", "axis"))
class PrefixStage(Stage):
    """prefix(v, axis): the exclusive running sum of v along axis, in ascending order (Prefix)."""

    def build(self, b, call, src, axis):
        idx = call.index
        if axis not in src.axes:
            b.fail(idx, f"{src.name!r} does not vary over axis {axis!r}", call.args[1])
        if src.dtype not in (F32, *_BITS):
            b.fail(idx, f"prefix: sums numbers, found {src.dtype}", call.args[0])
        if axis == b.rows:
            # blocks each sum their rows, then add the sums of the blocks before them: exact for integers only
            if src.dtype not in _BITS:
                b.fail(idx, f"prefix along the rows (axis {axis!r}) sums integers (a count); the rounding of a "
                            f"float sum along them would depend on how blocks split them", call.args[0])
            if b.spec.row_inner:
                b.fail(idx, f"prefix along the rows (axis {axis!r}) of an op whose rows are split in "
                            f"{b.spec.row_inner!r} is not supported", call.args[1])
        else:
            b.whole_axis(idx, axis, "prefix", call.args[1])
        out = b.define(idx, call.targets[0], src.axes, src.dtype)
        b.add(idx, Prefix(out, src, axis))


@dataclass(frozen=True)
class TreeSum(_OverSource, Step):
    """The pairwise sum of an xor butterfly over `axis`: for each offset o, a power of two below the
    extent N, from the largest down, s[i] = s[i] + s[i + o] for i < o, a partner past N skipped; the sum
    is s[0]. A warp's shuffle-xor reduction computes this tree (lanes past N hold nothing), so kernel and
    reference agree with it bit for bit."""

    out: Value
    src: Value
    axis: str

    def lower(self, lw):
        """In a copy that every thread can read and write (shared memory on CUDA), level by level: the
        offsets are 2^(L-1) .. 1 with L = tree_levels(N), the bits of N - 1 (the axis is held whole, so N
        is a static size), each level adding min(o, N - o) pairs. The levels are unrolled when the kernel
        is built (a `static` loop), so each offset is a constant; a fixed 31 levels (every extent an i32
        may have) left TVM 31 copies of each level to simplify before the empty ones fell away, which
        doubled the build of the gates' kernels. A level loop run at run time left the
        offset a shift of the loop index, whose bounds TileLang's ThreadSync could not prove: it took one
        row's thread reading its own row at i + o for a conflict with another row's, wanted a barrier
        inside the rows' `tx < B_t` branch and hoisted it out of the branch, with a race warning."""
        src = lw.bufs[self.src.name]
        tree = kir.Buffer(f"{self.out.name}_tree", src.axes, src.dtype, "shared")
        lw.emit(kir.Compute(tree, ir.Read(src.name, src.dtype)))
        n = ir.extent(self.axis)
        lvl, i = ir.Var(f"l_{self.axis}", I32), ir.Var(f"p_{self.axis}", I32)
        levels = ir.Call("tree_levels", (n,), I32)
        offset = op("shl", ir.i32(1), op("sub", op("sub", levels, ir.i32(1)), lvl))
        pairs = op("max", op("min", offset, op("sub", n, offset)), ir.i32(0))

        def at(pos):
            return tuple(pos if a == self.axis else ir.Index(a, local=True) for a in src.axes)
        step = kir.Compute(tree, op("add", ir.Read(tree.name, src.dtype, at(i)),
                                    ir.Read(tree.name, src.dtype, at(op("add", i, offset)))), at=((self.axis, i),))
        lw.emit(kir.Loop(lvl.name, levels, (kir.Loop(i.name, pairs, (step,)),), kind="static"))
        lw.emit(kir.Compute(lw.buffer(self.out), ir.Read(tree.name, src.dtype, at(ir.i32(0)))))


@stage("tree_sum", args=("value", "axis"))
class TreeSumStage(Stage):
    """tree_sum(v, axis): the sum of an xor butterfly's pairwise tree (TreeSum), f32."""

    def build(self, b, call, src, axis):
        idx = call.index
        if axis not in src.axes:
            b.fail(idx, f"{src.name!r} does not vary over axis {axis!r}", call.args[1])
        if src.dtype != F32:
            b.fail(idx, f"tree_sum adds float values, found {src.dtype}", call.args[0])
        b.whole_axis(idx, axis, "tree_sum", call.args[1])
        out = b.define(idx, call.targets[0], [a for a in src.axes if a != axis], src.dtype)
        b.add(idx, TreeSum(out, src, axis))
