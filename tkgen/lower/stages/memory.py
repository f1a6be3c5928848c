"""Memory stages: values read from input tensors.

- `load(x)`: the decoded elements of `x` over the axes of its view (f32; i32 for integer inputs, i64 for
  int64 ones); a tensor addressed `at:` positions is gathered at them (0 outside the tensor); `load(x, s)`:
  segment `s` of an input whose view splits a dim into segments of unequal length (a packed `kv`);
- `copy(x)`: its stored elements, never decoded (a bit-exact move to a `like: x` output), or `copy(x, s)`;
- `take(v, axis, i)`: a loaded value at one index of an axis (a load at that fixed index), also of rows
  gathered at positions (an axis of their view).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ...spec import expr as E
from ...ir import prim as ir, kernel as kir
from ...ir.prim import F32, I32, I64
from ...spec.signature import INT_ELEMS
from .base import RAW, Stage, Step, Value, stage


def _is_int(tensor) -> bool:
    return bool(tensor.dtypes) and all(dt in ("int32", "int64") for dt in tensor.dtypes)


def int_dtype(elem) -> str:
    """The value dtype of an integer element: i64 for int64 tensors, i32 for the others."""
    return I64 if elem == "int64" else I32


@dataclass(frozen=True)
class Load(Step):
    out: Value
    tensor: str
    fixed: Tuple[Tuple[str, int], ...] = ()   # (axis, index): axes of the tensor's view held at one index
    segment: Optional[str] = None             # of a tensor whose view has segments: the one read

    @staticmethod
    def dtype_of(tensor) -> str:
        """f32, or for integer inputs i64 when every dtype is int64 and i32 otherwise."""
        if not _is_int(tensor):
            return F32
        return I64 if set(tensor.dtypes) == {"int64"} else I32

    def lower(self, lw):
        sig = lw.sigs[self.tensor]
        for axis, i in self.fixed:        # an extent known only to the factory: checked there
            if E.names(lw.spec.axes[axis].extent):
                lw.checks.append((E.Binary("<", E.Num(i), E.Name(ir.extent_name(axis))),
                                  f"take: index {i} is outside axis {axis}"))
        if self.segment is not None:
            lw.check_segments(sig)
        lw.emit(kir.Compute(lw.buffer(self.out), lw.decoded(sig, self.fixed, self.out.axes, self.segment)))
        if lw.row_guard(self.out.axes) is not None:
            lw.zero_filled.add(self.out.name)


@dataclass(frozen=True)
class Copy(Step):
    out: Value                 # dtype RAW: the input's stored elements, never decoded
    tensor: str
    segment: Optional[str] = None
    index: Optional[Value] = None      # the loaded positions of a tensor addressed by rows at them

    prunable = False
    copies = True

    def sources(self):
        return {self.index.name} if self.index is not None else set()

    def lower(self, lw):
        sig = lw.sigs[self.tensor]
        if self.segment is not None:
            lw.check_segments(sig)
        if self.index is not None:
            fetch = gathered(lw, sig, lw.read(self.index), self.out.axes)
        else:
            fetch = ir.Fetch(self.tensor, lw.storage(sig, lw.logical(sig, (), self.segment)),
                             lw.row_guard(self.out.axes), view=None if self.segment is not None else lw.view(sig))
        lw.emit(kir.Compute(lw.buffer(self.out, RAW, sig.elem), fetch))


@dataclass(frozen=True)
class Gather(Step):
    out: Value                 # over the axes of the positions' view
    tensor: str                # an input addressed `at:` positions: its element at each position, 0 outside
    index: Value               # the loaded positions (i32)
    fixed: Tuple[Tuple[str, int], ...] = ()   # rows at positions: axes of the row view held at one index (take)

    def sources(self):
        return {self.index.name}

    def lower(self, lw):
        sig = lw.sigs[self.tensor]
        fetch = gathered(lw, sig, lw.read(self.index), self.out.axes, self.fixed)
        dtype = int_dtype(sig.elem) if sig.elem in INT_ELEMS else F32
        lw.emit(kir.Compute(lw.buffer(self.out), ir.Decode(sig.elem, fetch, dtype)))


def gathered(lw, sig, pos, axes, fixed=()) -> ir.Fetch:
    """The element of a tensor addressed `at:` positions (flat, or whole rows, `fixed` axes of the row
    view pinned), where `pos` is: guarded to positions inside the tensor (0 elsewhere)."""
    guard = ir.conj(lw.row_guard(axes), *lw.inside(pos, f"n_{sig.name}"))
    return ir.Fetch(sig.name, (pos,) if sig.flat else lw.at_rows(sig, pos, dict(fixed)), guard)


def _segment(b, call, tensor, node):
    """(the segment a load or copy reads, or None; the axes of the value)."""
    if tensor.segments is None:
        if node:
            b.fail(call.index, f"{call.fn}({tensor.name}, ...): {tensor.name!r} has no segments", node[0])
        return None, tensor.axes
    names = [n for n, _ in tensor.segments[1]]
    if not node or not isinstance(node[0], E.Name) or node[0].id not in names:
        b.fail(call.index, f"{tensor.name!r} is read one segment at a time: {call.fn}({tensor.name}, s) with s one "
                           f"of {', '.join(names)}", node[0] if node else None)
    return node[0].id, tensor.segment_axes(node[0].id)


@stage("load", args=("input", "node?"))
class LoadStage(Stage):
    def build(self, b, call, tensor, *part):
        name = call.targets[0]
        dtype = Load.dtype_of(tensor)
        segment, axes = _segment(b, call, tensor, part)
        if tensor.optional and not b.variant.get(f"?{tensor.name}"):
            b.constant(call.index, name, ir.c(tensor.absent, dtype))
            return
        out = b.define(call.index, name, axes, dtype)
        b.add(call.index, Gather(out, tensor.name, b.positions(call.index, tensor)) if tensor.at else
              Load(out, tensor.name, (), segment))


@stage("copy", args=("input", "node?"))
class CopyStage(Stage):
    def build(self, b, call, tensor, *part):
        segment, axes = _segment(b, call, tensor, part)
        if tensor.at and tensor.row_view is None:
            b.fail(call.index, f"copy({tensor.name}): a tensor at flat positions is loaded (`load`), not copied",
                   call.args[0])
        index = b.positions(call.index, tensor) if tensor.at else None
        b.add(call.index, Copy(b.define(call.index, call.targets[0], axes, RAW), tensor.name, segment, index))


@stage("take", args=("node", "axis", "node"))
class Take(Stage):
    def build(self, b, call, src, axis, at):
        idx = call.index
        if isinstance(src, E.Name) and src.id in b.consts:     # the load of an absent input: its constant
            b.constant(idx, call.targets[0], b.consts[src.id])
            return
        src = b.value_arg(idx, src)
        load = b.loaded(src.name)
        # or rows gathered at positions, at one index of an axis of their row view
        rows = next((x for x in b.steps if isinstance(x, Gather) and x.out.name == src.name), None)
        row_view = b.spec.inputs[rows.tensor].row_view if rows is not None else None
        if rows is not None and axis not in [a for g in row_view or () for a in g]:
            b.fail(idx, f"take(v, axis, i) of rows gathered at positions takes an axis of their view "
                        f"(the dims after the first)", call.args[1])
        if load is None and rows is None:
            b.fail(idx, "take(v, axis, i) takes a loaded value: `take(load(x), s, 0)`", call.args[0])
        if axis not in src.axes:
            b.fail(idx, f"{src.name!r} does not vary over axis {axis!r}", call.args[1])
        if not isinstance(at, E.Num) or not isinstance(at.value, int) or at.value < 0:
            b.fail(idx, "take(v, axis, i): i must be a non-negative integer literal", at)
        extent = b.spec.axes[axis].extent
        if not E.names(extent) and at.value >= E.evaluate(extent, {}):
            b.fail(idx, f"take(v, {axis}, {at.value}): axis {axis!r} has {E.evaluate(extent, {})} indices", at)
        out = b.define(idx, call.targets[0], [a for a in src.axes if a != axis], src.dtype)
        if load is not None:
            b.add(idx, Load(out, load.tensor, load.fixed + ((axis, at.value),), load.segment))
        else:
            b.add(idx, Gather(out, rows.tensor, rows.index, rows.fixed + ((axis, at.value),)))
