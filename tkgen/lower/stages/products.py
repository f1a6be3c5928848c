"""Products: `matmul(a, b, k)`, the sum over a shared axis `k` of the products of two values.

`a` varies over (m, k) and `b` over (n, k), each over one axis besides `k`; the result varies over (m, n).
Over the rows (`k` the dynamic axis: the weight gradient of a projection), each block multiplies its rows
and adds its part into the output, which starts at zero, as a sum over the rows does.
Each element is a sum of N_k products. The order in which they are added is the target's: the C target
and the reference add them in ascending k, one rounding per product and one per addition, from +0.0, so
they agree bit for bit; CUDA profiles run a tensor-core tile matmul (`T.gemm`), which reads float32
operands as TF32 (the low 13 mantissa bits ignored) and accumulates in float32 in its own order (see
docs/numerics.md). The step lowers to one `kir.Gemm`; the schedule streams `k` in chunks (`stream:`) and
either places the operands for `T.gemm` or expands the Gemm into that ordered loop (tkgen/schedule/gemm.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import kernel as kir
from ...ir.prim import F32
from .base import Stage, Step, Value, stage


@dataclass(frozen=True)
class MatMul(Step):
    out: Value
    a: Value
    b: Value
    axis: str

    def sources(self):
        return {self.a.name, self.b.name}

    def work(self, size, extent):
        return 2 * size(self.out.axes) * extent(self.axis)

    def accumulates(self, dyn_axis):
        return self.axis == dyn_axis

    def lower(self, lw):
        lw.emit(kir.Gemm(lw.bufs[self.a.name], lw.bufs[self.b.name], lw.buffer(self.out), self.axis))


@stage("matmul", args=("value", "value", "axis"))
class MatMulStage(Stage):
    """matmul(a, b, k): out[m, n] = sum over k of a[m, k] * b[n, k], f32."""

    def build(self, b, call, lhs, rhs, axis):
        idx = call.index
        for v, node in ((lhs, call.args[0]), (rhs, call.args[1])):
            if v.dtype != F32:
                b.fail(idx, f"matmul multiplies float values, found {v.dtype} ({v.name!r})", node)
            if axis not in v.axes:
                b.fail(idx, f"{v.name!r} does not vary over axis {axis!r}", call.args[2])
            if len(v.axes) != 2:
                b.fail(idx, f"matmul: {v.name!r} must vary over {axis!r} and one other axis, not "
                            f"{', '.join(v.axes) or 'none'}", node)
        (m,), (n,) = ([a for a in lhs.axes if a != axis], [a for a in rhs.axes if a != axis])
        if m == n:
            b.fail(idx, f"matmul: the two values share axis {m!r} besides {axis!r}; the result needs two", call.args[1])
        if b.spec.row_inner and axis == b.spec.row_inner:
            b.fail(idx, f"matmul: axis {axis!r} indexes the rows of a row block", call.args[2])
        if axis != b.rows:
            b.whole.add(axis)
        out = b.define(idx, call.targets[0], [m, n], F32)
        if axis == b.rows:
            b.partials.add(out.name)
        b.add(idx, MatMul(out, lhs, rhs, axis))
