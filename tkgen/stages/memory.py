"""Memory stages: values read from input tensors.

- `load(x)`: the decoded elements of `x` over the axes of its view (f32; i32 for integer inputs); a tensor
  addressed `at:` positions is gathered at them (0 outside the tensor);
- `copy(x)`: its stored elements, never decoded (a bit-exact move to a `like: x` output);
- `take(v, axis, i)`: a loaded value at one index of an axis (a load at that fixed index).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from .. import expr as E
from .. import ir, kir
from ..ir import F32, I32, op
from ..signature import INT_ELEMS
from .base import RAW, Stage, Step, Value, stage


def _is_int(tensor) -> bool:
    return bool(tensor.dtypes) and all(dt in ("int32", "int64") for dt in tensor.dtypes)


@dataclass(frozen=True)
class Load(Step):
    out: Value
    tensor: str
    fixed: Tuple[Tuple[str, int], ...] = ()   # (axis, index): axes of the tensor's view held at one index

    @staticmethod
    def dtype_of(tensor) -> str:
        return I32 if _is_int(tensor) else F32

    def lower(self, lw):
        sig = lw.sigs[self.tensor]
        for axis, i in self.fixed:        # an extent known only to the factory: checked there
            if E.names(lw.spec.axes[axis].extent):
                lw.checks.append((E.Binary("<", E.Num(i), E.Name(f"N_{axis}")),
                                  f"take: index {i} is outside axis {axis}"))
        lw.emit(kir.Compute(lw.buffer(self.out), lw.decoded(sig, self.fixed, self.out.axes)))
        if lw.row_guard(self.out.axes) is not None:
            lw.zero_filled.add(self.out.name)


@dataclass(frozen=True)
class Copy(Step):
    out: Value                 # dtype RAW: the input's stored elements, never decoded
    tensor: str

    prunable = False
    copies = True

    def lower(self, lw):
        sig = lw.sigs[self.tensor]
        fetch = ir.Fetch(self.tensor, lw.storage(sig, lw.logical(sig)), lw.row_guard(self.out.axes),
                         view=lw.view(sig))
        lw.emit(kir.Compute(lw.buffer(self.out, RAW, sig.elem), fetch))


@dataclass(frozen=True)
class Gather(Step):
    out: Value                 # over the axes of the positions' view
    tensor: str                # an input addressed `at:` positions: its element at each position, 0 outside
    index: Value               # the loaded positions (i32)

    def sources(self):
        return {self.index.name}

    def lower(self, lw):
        sig = lw.sigs[self.tensor]
        pos = lw.read(self.index)
        n = ir.Size(f"n_{self.tensor}")
        guard = ir.conj(lw.row_guard(self.out.axes), op("ge", pos, ir.i32(0)), op("lt", pos, n))
        fetch = ir.Fetch(self.tensor, (pos,), guard)
        dtype = I32 if sig.elem in INT_ELEMS else F32
        lw.emit(kir.Compute(lw.buffer(self.out), ir.Decode(sig.elem, fetch, dtype)))


@stage("load", args=("input",))
class LoadStage(Stage):
    def build(self, b, call, tensor):
        name = call.targets[0]
        dtype = Load.dtype_of(tensor)
        if tensor.optional and not b.variant.get(f"?{tensor.name}"):
            b.constant(call.index, name, ir.c(tensor.absent, dtype))
            return
        out = b.define(call.index, name, tensor.axes, dtype)
        b.add(call.index, Gather(out, tensor.name, b.positions(call.index, tensor)) if tensor.at else
              Load(out, tensor.name))


@stage("copy", args=("input",))
class CopyStage(Stage):
    def build(self, b, call, tensor):
        b.add(call.index, Copy(b.define(call.index, call.targets[0], tensor.axes, RAW), tensor.name))


@stage("take", args=("value", "axis", "node"))
class Take(Stage):
    def build(self, b, call, src, axis, at):
        idx = call.index
        load = b.loaded(src.name)
        if load is None:
            b.fail(idx, "take(v, axis, i) takes a loaded value: `take(load(x), s, 0)`", call.args[0])
        if axis not in src.axes:
            b.fail(idx, f"{src.name!r} does not vary over axis {axis!r}", call.args[1])
        if not isinstance(at, E.Num) or not isinstance(at.value, int) or at.value < 0:
            b.fail(idx, "take(v, axis, i): i must be a non-negative integer literal", at)
        extent = b.spec.axes[axis].extent
        if not E.names(extent) and at.value >= E.evaluate(extent, {}):
            b.fail(idx, f"take(v, {axis}, {at.value}): axis {axis!r} has {E.evaluate(extent, {})} indices", at)
        out = b.define(idx, call.targets[0], [a for a in src.axes if a != axis], src.dtype)
        b.add(idx, Load(out, load.tensor, load.fixed + ((axis, at.value),)))
