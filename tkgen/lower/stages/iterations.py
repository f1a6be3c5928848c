"""Iterations with carried state: `alternate_normalize` and its gradient `alternate_normalize_grad`.

`alternate_normalize(v, a, b, k, eps)` divides v by (its sum over a + eps), then by (its sum over b + eps),
then over a again, and so on: N_k divisions in all, N_k being the extent of axis `k`, which counts them
(an axis no value varies over; its extent may be any size expression, `2 * repeat - 1`). Normalising the
rows and columns of a positive matrix in turn drives it towards a doubly stochastic one. The value is a
tile carried through a serial loop of pairs of steps (and one last step when N_k is odd), so the kernel
and the reference run the same divisions in the same order; each sum is the target's reduction.

`alternate_normalize_grad(g, v, a, b, k, eps)` is the gradient with respect to v of
`alternate_normalize(v, a, b, k, eps)`, given g, the gradient reaching its result. It walks the steps
backwards. For a step y = z / (s + eps), s = sum(z, axis): dz = (dy - sum(dy * z, axis) / (s + eps)) /
(s + eps). Each step's input z is recomputed from v (the same divisions as the forward, so the same bits)
rather than kept: a kernel holding all N_k iterates of every row it works on would need N_k tiles of v.
The recomputation costs about N_k^2 / 8 pairs of steps instead of N_k / 2 (19 divisions of the forward
become about 90 for repeat = 10), on tiles that are small.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import prim as ir, kernel as kir
from ...ir.prim import F32, I32, op
from .base import Stage, Step, Value, stage


def _normalize(z: kir.Buffer, s: kir.Buffer, axis, eps) -> tuple:
    """z = z / (sum(z, axis) + eps), with the sum into s."""
    return (kir.Reduce(s, z, axis, "sum"),
            kir.Compute(z, op("div", ir.Read(z.name, F32), op("add", ir.Read(s.name, F32), eps))))


def _sum_buffer(name, src: kir.Buffer, axis) -> kir.Buffer:
    return kir.Buffer(name, tuple(x for x in src.axes if x != axis), F32)


@dataclass(frozen=True)
class AlternateNormalize(Step):
    out: Value
    src: Value
    first: str                 # the axis of the first division (and of every odd-numbered one)
    second: str
    count: str                 # the axis whose extent is the number of divisions
    eps: ir.Expr

    def sources(self):
        return {self.src.name} | ir.var_names(self.eps)

    def work(self, size, extent):
        return 3 * size(self.src.axes) * extent(self.count)

    def lower(self, lw):
        out = lw.buffer(self.out)
        eps = lw.convert(self.eps)
        sa = _sum_buffer(f"{out.name}_sum_{self.first}", out, self.first)
        sb = _sum_buffer(f"{out.name}_sum_{self.second}", out, self.second)
        n = ir.extent(self.count)
        lw.emit(kir.Compute(out, lw.read(self.src)))
        pair = _normalize(out, sa, self.first, eps) + _normalize(out, sb, self.second, eps)
        lw.emit(kir.Loop(f"r_{self.count}", op("floordiv", n, ir.i32(2)), pair))
        # an odd count ends on the first axis: a loop of one step or none
        lw.emit(kir.Loop(f"last_{self.count}", op("floormod", n, ir.i32(2)), _normalize(out, sa, self.first, eps)))


@dataclass(frozen=True)
class AlternateNormalizeGrad(Step):
    out: Value
    grad: Value
    src: Value
    first: str
    second: str
    count: str
    eps: ir.Expr

    def sources(self):
        return {self.grad.name, self.src.name} | ir.var_names(self.eps)

    def work(self, size, extent):
        n = extent(self.count)
        return 3 * size(self.src.axes) * (n * n // 8 + 3 * n)

    def lower(self, lw):
        """dv starts as g; the last step (on the first axis, when the count is odd) is undone first, then
        the pairs from the last to the first, each from its input recomputed by the pairs before it."""
        dv = lw.buffer(self.out)
        eps = lw.convert(self.eps)
        name = dv.name
        axes = dv.axes
        z = kir.Buffer(f"{name}_z", axes, F32)           # a step's input, recomputed
        za = kir.Buffer(f"{name}_za", axes, F32)         # the input of a pair's first step
        prod = kir.Buffer(f"{name}_prod", axes, F32)
        s = {a: _sum_buffer(f"{name}_sum_{a}", dv, a) for a in (self.first, self.second)}
        d = {a: _sum_buffer(f"{name}_dot_{a}", dv, a) for a in (self.first, self.second)}
        n = ir.extent(self.count)
        pairs = op("floordiv", n, ir.i32(2))
        back = ir.Var(f"r_{self.count}", I32)

        def recompute(done):
            """z = v after `done` pairs of steps."""
            return (kir.Compute(z, lw.read(self.src)),
                    kir.Loop(f"m_{self.count}", done, _normalize(z, s[self.first], self.first, eps)
                             + _normalize(z, s[self.second], self.second, eps)))

        def undo(src: kir.Buffer, axis):
            """dv = (dv - sum(dv * src, axis) / (sum(src, axis) + eps)) / (sum(src, axis) + eps)."""
            den = op("add", ir.Read(s[axis].name, F32), eps)
            return (kir.Reduce(s[axis], src, axis, "sum"),
                    kir.Compute(prod, op("mul", ir.Read(dv.name, F32), ir.Read(src.name, F32))),
                    kir.Reduce(d[axis], prod, axis, "sum"),
                    kir.Compute(dv, op("div", op("sub", ir.Read(dv.name, F32),
                                                 op("div", ir.Read(d[axis].name, F32), den)), den)))

        lw.emit(kir.Compute(dv, lw.read(self.grad)))
        lw.emit(kir.Loop(f"last_{self.count}", op("floormod", n, ir.i32(2)),
                         recompute(pairs) + undo(z, self.first)))
        done = op("sub", op("sub", pairs, ir.i32(1)), back)
        # z after the pair's first step: za / (sum(za, first) + eps)
        second_input = (kir.Compute(za, ir.Read(z.name, F32)),) + _normalize(z, s[self.first], self.first, eps)
        lw.emit(kir.Loop(back.name, pairs, recompute(done) + second_input + undo(z, self.second)
                         + undo(za, self.first)))


def _check(b, call, src, first, second, count, eps_node, what):
    idx = call.index
    for ax, node in ((first, call.args[-4]), (second, call.args[-3])):
        if ax not in src.axes:
            b.fail(idx, f"{src.name!r} does not vary over axis {ax!r}", node)
        b.whole_axis(idx, ax, what, node)
    if first == second:
        b.fail(idx, f"{what}: the two axes must differ", call.args[-3])
    if count in src.axes or count == b.rows:
        b.fail(idx, f"{what}: axis {count!r} counts the steps; no value may vary over it", call.args[-2])
    if src.dtype != F32:
        b.fail(idx, f"{what} normalizes float values, found {src.dtype}", call.args[0])
    axes = set()
    eps = b.operands(idx, (eps_node,), axes)[0]
    if axes or eps.dtype != F32:
        b.fail(idx, f"{what}: eps is a float constant or param", eps_node)
    return eps


@stage("alternate_normalize", args=("value", "axis", "axis", "axis", "node"))
class AlternateNormalizeStage(Stage):
    """alternate_normalize(v, a, b, k, eps): N_k divisions by the sum over a, b, a, ... plus eps."""

    def build(self, b, call, src, first, second, count, eps):
        eps = _check(b, call, src, first, second, count, eps, "alternate_normalize")
        out = b.define(call.index, call.targets[0], src.axes, F32)
        b.add(call.index, AlternateNormalize(out, src, first, second, count, eps))


@stage("alternate_normalize_grad", args=("value", "value", "axis", "axis", "axis", "node"))
class AlternateNormalizeGradStage(Stage):
    """alternate_normalize_grad(g, v, a, b, k, eps): the gradient of alternate_normalize(v, a, b, k, eps)
    with respect to v, given g over v's axes."""

    def build(self, b, call, grad, src, first, second, count, eps):
        eps = _check(b, call, src, first, second, count, eps, "alternate_normalize_grad")
        if grad.axes != src.axes or grad.dtype != F32:
            b.fail(call.index, "alternate_normalize_grad: g is a float value over the axes of v", call.args[0])
        out = b.define(call.index, call.targets[0], src.axes, F32)
        b.add(call.index, AlternateNormalizeGrad(out, grad, src, first, second, count, eps))
