"""Reductions: `absmax`, `amax`, `amin`, `sum` of a value over one of its axes.

absmax, amax and amin are exact in any order (a zero result of a float max or min is +0.0, whichever zero
a reduction met first); `sum` is order-dependent. Over the rows (the dynamic axis), each block reduces its
own rows and adds that into the output, which starts at zero.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir, kir
from ..ir import F32, I32, I64, op
from .base import Stage, Step, Value, stage

KINDS = {"absmax": "absmax", "amax": "max", "amin": "min", "sum": "sum"}
INT_REDUCTIONS = {"amax", "amin"}        # the reductions integer values take: exact in any order
_NEUTRAL = {"absmax": 0.0, "sum": 0.0, "max": float("-inf"), "min": float("inf")}
_INT_NEUTRAL = {"max": -2 ** 31, "min": 2 ** 31 - 1, "sum": 0}


def neutral(kind: str, dtype: str) -> ir.Const:
    """The value that leaves a reduction unchanged (what padding and masked elements must hold)."""
    if dtype in (I32, I64):
        return ir.Const(_INT_NEUTRAL[kind], dtype)
    return ir.c(_NEUTRAL[kind])


@dataclass(frozen=True)
class Reduce(Step):
    out: Value
    kind: str                  # absmax | max | min | sum
    src: Value
    axis: str

    def sources(self):
        return {self.src.name}

    def work(self, size, extent):
        return size(self.src.axes)

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
        if src.dtype != F32 and not (src.dtype == I32 and fn in INT_REDUCTIONS):
            b.fail(idx, f"{fn} needs float values" + (" (integers take amax and amin)" if src.dtype == I32 else ""),
                   call.args[0])
        if axis == b.rows and fn != "sum":
            b.fail(idx, f"over the rows (axis {axis!r}) a reduction is a sum: blocks split the rows, and each adds "
                        "its part into the output", call.args[1])
        b.whole.add(axis)
        out = b.define(idx, call.targets[0], [a for a in src.axes if a != axis], src.dtype)
        if axis == b.rows:
            b.partials.add(out.name)
        b.add(idx, Reduce(out, KINDS[fn], src, axis))
