"""Stages over the rows and across blocks: which rows are written (`keep_rows`), counts over every block
(`count`), and values joined along a new axis (`join`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from ...ir import prim as ir, kernel as kir
from ...ir.prim import I32, op
from .base import Stage, Step, Value, expr_work, order, stage
from .elementwise import Map


@stage("keep_rows")
class KeepRows(Stage):
    """keep = keep_rows(c): the rows where the per-row condition c holds are computed and written; the
    others are left untouched (no output element of theirs is stored, their later loads give 0) and add
    nothing to counts and sums over rows. A condition that folds to true keeps every row."""

    acts = True

    def build(self, b, call, node):
        idx, name = call.index, call.targets[0]
        if idx != 0:
            b.fail(idx, "keep_rows(c) must be the first statement: every load and store of a row depends on it")
        cond = ir.fold(b.elementwise(idx, node, set()))
        axes = b.axes_of(cond)
        dyn = next(iter(b.spec.axes))
        if cond.dtype != ir.BOOL or (axes and axes != {dyn}) or b.spec.row_inner:
            b.fail(idx, f"keep_rows(c): c must be a condition over the rows alone (axis {dyn!r}; not row blocks)")
        if isinstance(cond, ir.Const):
            if not cond.value:
                b.fail(idx, "keep_rows(c): c is always false, so nothing would be written")
            b.constant(idx, name, cond)
            return
        b.keep = b.define(idx, name, (dyn,), ir.BOOL)
        b.add(idx, Map(b.keep, cond))


@dataclass(frozen=True)
class Count(Step):
    out: Value                 # i32 over the kept axes: this block's part of a count over every block
    expr: ir.Expr              # bool over `axes`
    axes: Tuple[str, ...]
    kept: Tuple[str, ...] = ()  # axes not counted over: one counter per index (the bins of a histogram)

    def sources(self):
        return ir.var_names(self.expr)

    def work(self, size, extent):       # the condition, and the sum of its ones
        return (expr_work(self.expr) + 1) * size(self.axes)

    def lower(self, lw):
        """This op's count of the elements where a condition holds (rows outside the tensor, rows not kept
        and padding count nothing): 1/0 in an int32 tile, reduced over its counted axes one at a time
        (last first). Each block adds its counts into the output (the store accumulates: integer atomics,
        so the total is exact and the same in any order)."""
        ones = kir.Buffer(f"{self.out.name}_ones", self.axes, I32)
        cond = ir.conj(lw.row_guard(self.axes), lw.convert(self.expr))
        lw.emit(kir.Compute(ones, op("select", cond, ir.i32(1), ir.i32(0))))
        axes, src = list(self.axes), ones
        counted = [a for a in self.axes if a not in self.kept]
        while counted:
            axis = counted.pop()
            axes.remove(axis)
            dst = kir.Buffer(f"{self.out.name}_by_{axes[-1]}", tuple(axes), I32) if counted else \
                lw.buffer(self.out)
            lw.emit(kir.Reduce(dst, src, axis, "sum"))
            src = dst
        if not self.axes:
            lw.emit(kir.Compute(lw.buffer(self.out), ir.i32(0)))


@stage("count", args=("node", "axis*"))
class CountStage(Stage):
    """count(c) counts over every element; count(c, a, ...) keeps the axes a, ...: one count per index of
    them (a histogram: `count(ids == iota(e), e)` counts each expert's ids)."""

    def kinds(self, n):
        return ("node",) + ("axis",) * (n - 1) if n >= 1 else None

    def arity_problem(self, fn, n):
        return None if n >= 1 else "count(c, axes...) takes a condition and the axes it keeps"

    def build(self, b, call, node, *kept):
        idx = call.index
        axes = set()         # those of the condition as written: folded to a constant, it counts 0 there
        cond = ir.fold(b.elementwise(idx, node, axes))
        if cond.dtype != ir.BOOL:
            b.fail(idx, "count(c) counts where a condition holds: c must be a comparison", node)
        if next(iter(b.spec.axes)) not in axes:
            b.fail(idx, "count(c): c must vary over the rows (each block counts its own elements)", node)
        for i, a in enumerate(kept):
            if a not in axes or a in kept[:i] or a == b.rows:
                b.fail(idx, f"count(c, ...): each axis kept is one the condition varies over, once, and not the "
                            f"rows ({a!r})", call.args[i + 1])
        if kept:             # a histogram's axes are held whole, padded to a power of two on CUDA: the others
            b.whole |= axes - {b.rows}                # are reduced in the block, its bins a tile of their own
        out = b.define(idx, call.targets[0], kept, I32)
        b.counts.add(out.name)
        b.add(idx, Count(out, cond, order(b.spec, axes), order(b.spec, kept)))


@stage("join", args=("node", "node*", "axis"))
class Join(Stage):
    """join(v0, v1, ..., axis): a value over `axis` (extent = number of parts) whose slice i is vi."""

    def arity_problem(self, fn, n):
        return "join(v0, v1, ..., axis) takes two or more values and a new axis" if n < 3 else None

    def build(self, b, call, *args):
        idx, axis = call.index, args[-1]
        axes = set()
        b.joining = True
        parts = [b.elementwise(idx, a, axes) for a in args[:-1]]
        b.joining = False
        counted = [isinstance(p, ir.Var) and p.name in b.counts for p in parts]
        if any(counted) and not all(counted):
            b.fail(idx, "join: counts are joined only with other counts")
        if axis in axes:
            b.fail(idx, f"join: the parts must not vary over the new axis {axis!r}", call.args[-1])
        if len({p.dtype for p in parts}) != 1:
            b.fail(idx, "join: the parts must have one dtype")
        at = ir.Var(f"#{axis}", I32)                  # the index along `axis`
        e = parts[-1]
        for i in range(len(parts) - 2, -1, -1):
            e = op("select", op("eq", at, ir.Const(i, I32)), parts[i], e)
        b.add(idx, Map(b.define(idx, call.targets[0], axes | {axis}, e.dtype), ir.fold(e)))
        if all(counted):
            b.counts.add(call.targets[0])
