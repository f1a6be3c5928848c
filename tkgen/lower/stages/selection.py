"""Selection: `topk(v, over, new)`, the indices of the k largest elements of `v` along `over`, in the order
of a stable descending sort (ties to the smaller index, NaN above every number, -0.0 equal to +0.0); the
extent of `new` is k. `gather(v, i, axis)`: the elements of `v` at data-dependent indices along an axis
(through a top-k result, say), and `topk_values(v, over, new)`, the elements top-k selects."""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import prim as ir, kernel as kir
from ...ir.prim import F32, I32, op
from ...spec import expr as E
from .base import INTS, Call, Stage, Step, Value, stage

INT_MIN = -2 ** 31


def topk_key() -> ir.Function:
    """float32 -> int32 key whose integer order is the order of a stable descending sort on floats.

    -0.0 becomes +0.0 (they tie) and every NaN becomes one canonical NaN that ranks above +inf.
    """
    b = ir.Builder()
    x = ir.Var("x", F32)
    # isnan, not `x != x`: compilers fold the self-comparison to false. (Testing the bits instead made
    # TileLang's lowering of the top-k loop ten times slower.)
    canon = op("select", op("isnan", x), op("from_bits", ir.u32(0x7FC00000)),
               op("select", op("eq", x, ir.c(0.0)), ir.c(0.0), x))
    s = b.let("s", op("u32_to_i32", op("bits", canon)))
    key = op("select", op("lt", s, ir.i32(0)), op("bitxor", s, ir.i32(0x7FFFFFFF)), s)
    return ir.Function("order_key", (x,), tuple(b.lets), key, "float32 -> int32 key ordered like a stable sort")


@dataclass(frozen=True)
class TopK(Step):
    out: Value
    src: Value
    over: str
    new: str

    def sources(self):
        return {self.src.name}

    def work(self, size, extent):
        return size(self.src.axes) * extent(self.new)

    def lower(self, lw):
        """k rounds over the order keys: the largest key, then the smallest index holding it, which is the
        round's pick; that index then ranks below every key. Keys past the extent of the selected axis rank
        below every key too, so they are never picked (k <= extent). A result that is only an output is
        stored round by round; one that later stages read is collected in a tile first. (One reduction over
        int64 keys packing the index into the low word was tried: 9% slower on an H200 for 256 experts,
        k = 8, since every step of it is two shuffles and a 64-bit compare.)"""
        src = lw.bufs[self.src.name]
        rest = tuple(a for a in src.axes if a != self.over)
        name = self.out.name + "_tile" if self.out.name in lw.spec.tensors else self.out.name
        key = kir.Buffer(f"{name}_key", src.axes, I32, pad_safe=True)
        cand = kir.Buffer(f"{name}_cand", src.axes, I32, pad_safe=True)
        best = kir.Buffer(f"{name}_best", rest, I32)
        pick = kir.Buffer(f"{name}_pick", rest, I32)
        lw.helpers.add("order_key")
        rd = lambda b: ir.Read(b.name, b.dtype)  # noqa: E731
        over = ir.Index(self.over, local=True)
        valid = op("lt", over, ir.extent(self.over))
        lw.emit(kir.Compute(key, op("select", valid, ir.Call("order_key", (rd(src),), I32), ir.i32(INT_MIN))))
        rnd = ir.Var(f"r_{self.new}", I32)
        outputs = [t for t, v in lw.program.outputs.items() if v.name == self.out.name]
        read_later = any(self.out.name in x.sources() for x in lw.program.steps)
        if outputs and not read_later:
            sig = lw.sigs[outputs[0]]
            idx = tuple(lw.group_index(g, {}) if self.new not in g else
                        ir.rebuild(lw.group_index(g, {}), lambda n: rnd if n == ir.Index(self.new) else None)
                        for g in sig.view)
            keep = lw.row_guard(rest)
            publish = kir.Store(outputs[0], lw.storage(sig, idx), ir.Encode(sig.elem, rd(pick)), rest, keep)
            lw.stored_in_loop.update(outputs)
        else:
            # collected where every thread reads it: a fragment written one slice per round does not take
            # the layout of the loops that read it (TileLang 0.1.15's layout inference fails)
            publish = kir.Compute(lw.buffer(self.out, scope="shared"), rd(pick), at=((self.new, rnd),))
        body = (kir.Reduce(best, key, self.over, "max"),
                kir.Compute(cand, op("select", op("eq", rd(key), rd(best)), over, ir.extent(self.over))),
                kir.Reduce(pick, cand, self.over, "min"),
                publish,
                kir.Compute(key, op("select", op("eq", over, rd(pick)), ir.i32(INT_MIN), rd(key))))
        # unrolled while short: the rounds overlap (3-4% faster for k = 8 on an H200)
        lw.emit(kir.Loop(rnd.name, ir.extent(self.new), tuple(kir.map_exprs(body, ir.fold)), kind="unroll",
                         limit=16))


@stage("topk", args=("value", "axis", "axis"))
class TopKStage(Stage):
    def build(self, b, call, src, over, new):
        idx = call.index
        if over not in src.axes or new in src.axes:
            b.fail(idx, f"topk(v, over, new): v must vary over {over!r} and not over {new!r}")
        if src.dtype != F32:
            b.fail(idx, f"topk ranks float values, found {src.dtype}", call.args[0])
        b.whole_axis(idx, over, "topk", call.args[1])
        b.whole_axis(idx, new, "topk", call.args[2])
        out = b.define(idx, call.targets[0], [a for a in src.axes if a != over] + [new], I32)
        b.add(idx, TopK(out, src, over, new))


@dataclass(frozen=True)
class GatherAlong(Step):
    """out = src at index[...] along `axis` (src's other axes at the statement's indices), 0 where the
    index lies outside [0, extent)."""

    out: Value
    src: Value
    index: Value               # integer, over any axes but `axis`
    axis: str

    def sources(self):
        return {self.src.name, self.index.name}

    def work(self, size, extent):
        return size(self.out.axes)

    def lower(self, lw):
        """From a copy of the source that every thread can read (shared memory on CUDA): the element at
        a data-dependent index may be held by another thread."""
        src = lw.bufs[self.src.name]
        staged = lw.shared_copy(self.src, self.axis)
        pos = lw.read(self.index)
        inside = ir.conj(*lw.inside(pos, ir.extent_name(self.axis)))
        at = pos if pos.dtype == I32 else op("to_i32", pos)      # inside the axis, so exact
        idx = tuple(at if a == self.axis else ir.Index(a, local=True) for a in src.axes)
        lw.emit(kir.Compute(lw.buffer(self.out), ir.Read(staged.name, src.dtype, idx, inside)))


def _gather(b, call, src, index, axis, name):
    idx = call.index
    if axis not in src.axes:
        b.fail(idx, f"{src.name!r} does not vary over axis {axis!r}", call.args[2])
    if index.dtype not in INTS:
        b.fail(idx, f"gather: the indices are integers, found {index.dtype}", call.args[1])
    if axis in index.axes:
        b.fail(idx, f"gather: the indices must not vary over axis {axis!r}", call.args[1])
    if src.dtype not in (F32, *INTS):
        b.fail(idx, f"gather: gathers numbers, found {src.dtype}", call.args[0])
    b.whole_axis(idx, axis, "gather", call.args[2])
    out = b.define(idx, name, (set(src.axes) - {axis}) | set(index.axes), src.dtype)
    b.add(idx, GatherAlong(out, src, index, axis))


@stage("gather", args=("node", "node", "axis"))
class Gather(Stage):
    """gather(v, i, axis): v at the integer indices i along axis, over i's axes and v's others. A `v` that
    is a constant (the load of an absent optional input) gathers to itself."""

    def build(self, b, call, src, index, axis):
        if isinstance(src, E.Name) and src.id in b.consts and src.id not in b.values:
            b.constant(call.index, call.targets[0], b.consts[src.id])
            return
        _gather(b, call, b.value_arg(call.index, src), b.value_arg(call.index, index), axis, call.targets[0])


@stage("topk_values", args=("value", "axis", "axis"))
class TopKValues(Stage):
    """topk_values(v, over, new): the elements of v that topk(v, over, new) selects, in its order."""

    def build(self, b, call, src, over, new):
        """The selection of an equal topk already built is reused (its indices are then read twice)."""
        same = next((st.out for st in b.steps
                     if isinstance(st, TopK) and (st.src, st.over, st.new) == (src, over, new)), None)
        if same is None:
            same = f"_{call.targets[0]}_picks"
            TopKStage().build(b, Call(call.index, "topk", (same,), call.args, call.col), src, over, new)
            same = b.values[same]
        _gather(b, call, src, same, over, call.targets[0])
