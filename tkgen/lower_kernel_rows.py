"""Kernel lowering of the row features: kept rows, tensors addressed `at:` positions, and counts.

A mixin of `lower_kernel._KernelLowering` (it uses its buffers, loops and guards):

- `keep_rows(c)`: once the per-row condition is computed, every later guard of a row includes it, so a row
  that is not kept is neither read nor written, and it adds nothing to sums over rows or to counts;
- a load of an input addressed `at:` positions reads one element per position, guarded to the tensor
  (`0 <= p < numel`, else 0); the tensor is passed flat, its numel a runtime symbol `n_<name>`;
- an output addressed `at:` positions is added into at each valid position (`T.atomic_add`; positions may
  repeat, and the op allocates the output with zeros);
- `count(c)`: each block counts its own elements in int32 (reductions over every axis of the tile), and
  its partial counts are added into the int64 output once per counter (`store` in lower_kernel).
"""
from __future__ import annotations


class RowFeatures:
    keep_elem = None               # the kept-rows condition of the current row, once computed

    def at_symbols(self):
        """(name, source) of the runtime numel of every tensor addressed `at:` positions in this variant."""
        return [(f"n_{t.name}", f'T.dynamic("n_{t.name}")') for t in self.spec.tensors.values()
                if t.at and (not t.optional or self.variant.get(f"?{t.name}"))]

    def keep_guard(self, axes):
        """The kept-rows part of a row guard (empty before the condition is computed, or off the rows)."""
        return [self.keep_elem] if self.keep_elem and self.dyn_axis in axes else []

    def kept(self, value):
        """Called once the kept-rows value is computed: later guards of a row include it."""
        self.keep_elem = self.elem(value)
        self.current = None          # a loop opened before must not take later work (its guard lacks the condition)

    def gather_src(self, st):
        """Source of the element of an input at the loaded position, 0 where the position is outside."""
        p = self.elem(st.index)
        guard = self.row_guard(st.out.axes, extra=(f"{p} >= 0", f"{p} < n_{st.tensor}"))
        zero = "T.float32(0.0)" if st.out.dtype == "f32" else "T.int32(0)"
        return f"T.if_then_else({guard}, LOAD_{st.tensor}({st.tensor}[{p}]), {zero})"

    def store_at(self, tname, v, src):
        """Add a value into an output at the loaded positions (valid ones only), in a loop of its own."""
        from .lower_kernel import Loop
        p = self.elem(self.program.values[self.program.at[tname]])
        loop = Loop(self.loop_axes(v.axes), guard=self.row_guard(v.axes, extra=(f"{p} >= 0", f"{p} < n_{tname}")))
        loop.stores.append((None, f"T.atomic_add({tname}[{p}], {src})"))
        self.add_item(loop)

    def count(self, st):
        """This block's count of the elements where a condition holds (rows past the end, rows not kept and
        padding count nothing): 1/0 in an int32 tile, reduced over its axes one at a time (last first)."""
        from .lower_kernel import Loop, ReduceItem
        missing = [a for a in self.tiled if a not in st.axes]
        if missing:
            raise ValueError(f"{self.spec.name}: count({st.out.name}) must vary over the axes split across blocks "
                             f"{self.tiled} (else each block along {missing[0]} would count the same elements)")
        src = f"{st.out.name}_ones"
        self.allocs.append((src, self.tile_shape(st.axes), '"int32"', self.alloc))
        idx = ", ".join(f"i_{a}" for a in st.axes)
        ones = f"T.if_then_else({self.printer(st.expr)}, T.int32(1), T.int32(0))"
        guard = self.row_guard(st.axes)
        self.add_item(Loop(self.loop_axes(st.axes),
                           assigns=[(f"{src}[{idx}]", f"T.if_then_else({guard}, {ones}, T.int32(0))" if guard else ones)]))
        axes = list(st.axes)
        while axes:
            axis = axes.pop()
            dst = f"{st.out.name}_by_{axes[-1]}" if axes else self.buffers[st.out.name]
            if axes:
                self.allocs.append((dst, self.tile_shape(axes), '"int32"', self.alloc))
            self.add_item(ReduceItem("T.reduce_sum", src, dst, len(axes)))
            src = dst
