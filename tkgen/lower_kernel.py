"""Stage 3a: lower one variant's Program to a TileLang kernel plan for one architecture profile.

The plan is plain data (loops, buffers, reductions, stores, with expressions already printed) that the
kernel template renders. The profile's knobs decide the few things that differ between targets: where
tiles live (fragment or local), which loops index them (T.Parallel or T.grid), how many threads, the
storage type of each format (native or integer codes through the generated codecs), pass configs and
compile flags. Everything else is emitted the same way for every target.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from . import expr as E
from . import ir
from .lower_kernel_rows import RowFeatures
from .printers import TileLangPrinter
from .stages import RAW, Copy, Count, Gather, Load, Map, Reduce, TopK

RESERVED_IDENTIFIERS = {"T", "tilelang", "kernel", "torch"}


def sym(name: str) -> str:
    """The Python identifier of a spec symbol (dim or param) in generated code."""
    return name + "_" if name in RESERVED_IDENTIFIERS else name


def py_expr(node: E.Node, rename=sym, tl=True) -> str:
    """Print a constant spec expression (shapes, extents) as Python over the factory's arguments.

    `tl`: the code runs where TileLang is imported as T (kernel factories), so ceildiv of a dynamic
    size stays symbolic; elsewhere (op checks, strategies) it is plain integer Python."""
    if isinstance(node, E.Num):
        return repr(node.value)
    if isinstance(node, E.Str):
        return repr(node.value)
    if isinstance(node, E.Name):
        return rename(node.id)
    if isinstance(node, E.Unary):
        inner = py_expr(node.arg, rename, tl)
        return f"(-{inner})" if node.op == "-" else f"(not {inner})"
    if isinstance(node, E.Binary):
        o = "//" if node.op == "/" else node.op    # exact: the model checks divisibility where it matters
        return f"({py_expr(node.lhs, rename, tl)} {o} {py_expr(node.rhs, rename, tl)})"
    if isinstance(node, E.Call):
        args = [py_expr(a, rename, tl) for a in node.args]
        if node.fn == "ceildiv":
            return f"T.ceildiv({args[0]}, {args[1]})" if tl else f"(-(-{args[0]} // {args[1]}))"
        if node.fn == "align":
            return f"(-(-{args[0]} // {args[1]}) * {args[1]})"
        if node.fn in ("min", "max"):
            return f"{node.fn}({', '.join(args)})"
        raise ValueError(f"function {node.fn!r} is not available in shapes and sizes")
    raise TypeError(node)


@dataclass
class Loop:
    axes: List[tuple]                 # (loop var, extent source)
    assigns: List[tuple] = field(default_factory=list)   # (lhs, rhs) into tile buffers
    stores: List[tuple] = field(default_factory=list)    # (lhs, rhs) into output tensors, row-guarded
    guard: Optional[str] = None
    kind: str = "loop"


@dataclass
class ReduceItem:
    fn: str
    src: str
    dst: str
    dim: int
    kind: str = "reduce"


@dataclass
class TopKItem:
    key_axes: List[tuple]
    rest_axes: List[tuple]
    key: str
    cand: str
    best: str
    pick: str
    over_var: str
    over_extent: str
    k_extent: str
    round_var: str
    out_lhs: str
    out_rhs: str
    guard: Optional[str]
    over_dim: int
    kind: str = "topk"


@dataclass
class KernelPlan:
    name: str
    args: List[str]                   # factory arguments (static dims and params, input dtypes)
    preamble: List[tuple]             # (name, python source) evaluated in the factory
    checks: List[tuple]               # (condition source, message) checked in the factory
    storages: List[tuple]             # (name, {dtype: storage}) per multi-dtype input
    dispatch: List[tuple]             # (name, input, {dtype: lambda source}): per-dtype functions (LOAD_x ...)
    tensors: List[tuple]              # (name, shape source, dtype source)
    grid: List[tuple]                 # (block var, extent source) of T.Kernel
    block_ids: List[tuple]            # (b_<axis>, source) when several tiled axes share one block index
    knobs: List[tuple]                # (name, default): schedule keyword arguments of the factory
    allocs: List[tuple]               # (name, shape source, dtype, allocator)
    body: list
    helpers: List[str]                # codec helper names used


class _KernelLowering(RowFeatures):
    def __init__(self, spec, program, variant, arch, catalog, schedule):
        self.spec, self.program, self.variant, self.arch, self.catalog = spec, program, variant, arch, catalog
        self.schedule = schedule
        self.native = set(arch.native_formats)
        self.P = "T.Parallel" if arch.loops == "parallel" else "T.grid"
        self.alloc = "T.alloc_fragment" if arch.tile_memory == "fragment" else "T.alloc_local"
        # buffers that threads exchange elements through (one thread on the C target: its own memory)
        self.shared = "T.alloc_shared" if arch.tile_memory == "fragment" else "T.alloc_local"
        self.dyn_axis = next(iter(spec.axes)) if spec.dynamic_dim else None
        self.helpers = set()
        self.buffers = {}            # value name -> buffer name
        self.inlined = {}            # value name -> IR expr (outputs computed only to be stored)

    # -- axes ---------------------------------------------------------------------------------------
    def axis_plan(self):
        """Extents and block sizes of every axis, as factory-time Python; which axes split across blocks.

        Whole axes (reduced, top-k'd, or inner parts of a split tensor dim) are sized first, then the
        dynamic axis, then axes with explicit sizes, and last `auto` axes, which grow to the tile budget.
        """
        block = dict(self.schedule.get("block", {}))
        self.tiled, pre, checks, self.padded = [], [], [], set()
        self.knobs = [("threads", self.schedule.get("threads", self.arch.threads))]
        if self.spec.dynamic_dim:
            pre.append((sym(self.spec.dynamic_dim), f'T.dynamic("{self.spec.dynamic_dim}")'))
        pre += self.at_symbols()
        for name, ax in self.spec.axes.items():
            pre.append((f"N_{name}", py_expr(ax.extent)))
        kinds = {}
        used = self.program.used_axes
        # axes of counts: held whole and never padded (each element is one counter the block adds into)
        counted = {a for n in self.program.counts for a in self.program.values[n].axes}
        for name in self.spec.axes:
            if name not in used:
                continue            # only indexed at a fixed position (`take`): no tile extent, no loop
            want = block.get(name, 1 if name == self.dyn_axis else "auto")
            if name == self.dyn_axis:
                kinds[name] = ("dyn", want if isinstance(want, int) else 1)
            elif name in self.program.whole_axes or name in self._view_inner_axes() or want == "all" or name in counted:
                kinds[name] = ("whole", None)
            else:
                kinds[name] = ("auto", None) if want == "auto" else ("fixed", want)
        for rank in ("whole", "dyn", "fixed", "auto"):
            for name, (kind, size) in kinds.items():
                if kind != rank:
                    continue
                if kind == "whole":
                    if self.arch.pad_reduced and name in self.program.whole_axes and name not in counted:
                        # warp reductions want a power-of-two extent; the padding is never loaded or stored
                        pre.append((f"B_{name}", f"pad_pow2(N_{name})"))
                        self.padded.add(name)
                    else:
                        pre.append((f"B_{name}", f"N_{name}"))
                    continue
                self.tiled.append(name)
                if kind in ("dyn", "fixed"):
                    self.knobs.append((f"block_{name}", size))
                    pre.append((f"B_{name}", f"block_{name}"))
                    if kind == "fixed":
                        checks.append((f"N_{name} % B_{name} == 0", f"block size of axis {name} must divide its extent"))
                else:
                    sized = [o for o, (k, _) in kinds.items() if k != "auto" or list(kinds).index(o) < list(kinds).index(name)]
                    others = " * ".join(f"B_{o}" for o in sized) or "1"
                    pre.append((f"B_{name}", f"pick_block(N_{name}, max(1, tile_elems // ({others})), "
                                             f"{self._pack_multiple(name)})"))
        self.tiled.sort(key=list(self.spec.axes).index)
        if len(self.tiled) > 3:
            raise ValueError(f"{self.spec.name}: at most three axes can be split across blocks, not {self.tiled}")
        if any(k == "auto" for k, _ in kinds.values()):
            self.knobs.append(("tile_elems", self.schedule.get("tile_elems", self.arch.tile_elems)))
        return pre, checks

    def _view_inner_axes(self):
        """Axes that are not the major axis of a split tensor dim must be whole (their index is not tiled)."""
        inner, used = set(), self.program.used_axes
        for t in self.spec.tensors.values():
            for group in t.view:
                live = [a for a in group if a in used]     # an axis held at a fixed index is not the major
                inner.update(live[1:])
        return inner

    def _pack_multiple(self, axis):
        mult = 1
        for t in self.spec.tensors.values():
            pk = self.packing(t)
            if pk and t.view[-1][-1] == axis:
                mult = max(mult, pk.codes)
        return mult

    def tensor_format(self, t):
        """('element' | 'scale', format) of a tensor declared with `format:` or `scale_format:`, else None."""
        if t.format_ref:
            return "element", self.catalog.resolve_format(self.spec, t.format_ref, self.variant, "element")
        if t.scale_ref:
            return "scale", self.catalog.resolve_format(self.spec, t.scale_ref, self.variant, "scale")
        return None

    def packing(self, t):
        """The word packing of a tensor's codes in this variant, or None."""
        kf = self.tensor_format(t)
        if kf is None:
            return None
        kind, fmt = kf
        return fmt.pack if kind == "element" else fmt.packing

    def layout(self, t):
        """The tensor's layout in this variant when it is not row-major, else None."""
        if not t.layout_ref:
            return None
        lay = self.catalog.resolve_format(self.spec, t.layout_ref, self.variant, "layout")
        return lay if lay.order == "col_major" else None

    def at(self, t, parts):
        """Subscript of a tensor element from its per-dim indices (reversed for a column-major layout)."""
        return ", ".join(reversed(parts) if self.layout(t) else parts)

    def group_index(self, group, at=None):
        at = at or {}
        idx = at.get(group[0]) or self.gidx(group[0])
        for a in group[1:]:
            idx = f"({idx} * N_{a} + {at.get(a) or self.gidx(a)})"
        return idx

    def gidx(self, axis):
        return f"(b_{axis} * B_{axis} + i_{axis})" if axis in self.tiled else f"i_{axis}"

    def row_guard(self, axes, extra=()):
        """In-range condition of a tile element: rows past the dynamic size exist in the last block (its
        block size is a schedule knob), and padded axes run past their extent."""
        conds = []
        if self.dyn_axis in axes:
            inner = self.spec.row_inner
            if inner in axes:       # a row inside a row block: its row index against the dynamic size
                conds.append(f"({self.gidx(self.dyn_axis)} * N_{inner} + i_{inner}) < {sym(self.spec.dynamic_dim)}")
            else:
                conds.append(f"{self.gidx(self.dyn_axis)} < N_{self.dyn_axis}")
        conds += self.keep_guard(axes) + [f"i_{a} < N_{a}" for a in axes if a in self.padded] + list(extra)
        return " and ".join(conds) if len(conds) < 2 else "(" + ") & (".join(conds) + ")"

    def tensor_index(self, tensor, fixed=()):
        """Subscript of the tile element of a tensor; `fixed` pins axes to constant indices (a `take`)."""
        at = {a: str(i) for a, i in fixed}
        return self.at(tensor, [self.group_index(group, at) for group in tensor.view])

    def loop_axes(self, axes):
        return [(f"i_{a}", f"B_{a}") for a in axes]

    # -- storage ------------------------------------------------------------------------------------
    def storage(self, dtype_name):
        """TileLang dtype of a tensor of this element format or integer type on this target."""
        if dtype_name in self.catalog.elements:
            fmt = self.catalog.elements[dtype_name]
            native = fmt.native_on(self.arch.backend)
            return native if (native and dtype_name in self.native) else fmt.storage
        return dtype_name            # an integer type: the same name in TileLang

    def loader(self, dtype_name):
        if dtype_name in self.catalog.elements:
            fmt = self.catalog.elements[dtype_name]
            native = fmt.native_on(self.arch.backend)
            if native and dtype_name in self.native:
                return "lambda v: v" if fmt.is_float32 else 'lambda v: T.cast(v, "float32")'
            self.helpers.add(f"decode_{fmt.name}")
            return f'lambda v: decode_{fmt.name}(T.cast(v, "uint32"))'
        return 'lambda v: T.cast(v, "int32")'

    def rounder(self, dtype_name):
        fmt = self.catalog.elements[dtype_name]
        if fmt.is_float32:
            return "lambda v: v"
        self.helpers.add(f"round_{fmt.name}")
        return f"round_{fmt.name}"

    def encode_store(self, tensor, value_src):
        """Source that converts a float32 (or index) value into the element type `tensor` stores."""
        if tensor.like:
            return f"STORE_{tensor.name}({value_src})"
        if tensor.format_ref:
            fmt = self.catalog.resolve_format(self.spec, tensor.format_ref, self.variant, "element")
        elif tensor.dtypes[0] in ("int32", "int64"):
            return f'T.cast({value_src}, "{tensor.dtypes[0]}")'
        else:
            fmt = self.catalog.elements[tensor.dtypes[0]]
        return self.encode_format(fmt, value_src)

    def encode_format(self, fmt, value_src):
        native = fmt.native_on(self.arch.backend)
        if native and fmt.name in self.native:
            if fmt.is_float32:
                return value_src
            if fmt.overflow == "saturate" and not self.arch.native_casts_saturate:
                # clamp first where the conversion itself may not saturate. A NaN passes around the clamp
                # (fmaxf would make it -max) to become the format's NaN code. (Where the conversion does
                # saturate, the bare cast is what TileLang vectorizes: on CUDA a clamp, and more so the
                # NaN test, turned 16-byte e4m3 stores into byte stores.)
                m = repr(fmt.max_value)
                clamped = f"T.clamp({value_src}, T.float32(-{m}), T.float32({m}))"
                value_src = clamped if fmt.specials == "finite" else \
                    f"T.if_then_else(T.isnan({value_src}), {value_src}, {clamped})"
            return f'T.cast({value_src}, "{native}")'
        self.helpers.add(f"encode_{fmt.name}")
        return f'T.cast(encode_{fmt.name}({value_src}), "{fmt.storage}")'

    # -- body ---------------------------------------------------------------------------------------
    def loop_for(self, axes):
        """The open loop over exactly these axes, or a new one (consecutive same-axes work fuses)."""
        want = self.loop_axes(axes)
        if self.current is None or self.current.axes != want:
            self.current = Loop(want, guard=self.row_guard(axes))
            self.body.append(self.current)
        return self.current

    def add_item(self, item):
        self.current = None
        self.body.append(item)

    def build(self, name):
        pre, checks = self.axis_plan()
        p = self.program
        self.body, self.allocs, self.current = [], [], None
        consumers = set()
        for st in p.steps:
            consumers |= self._sources(st)
        tensors, storages, dispatch, args = [], [], [], []
        args += [sym(d.name) for d in self.spec.dims.values() if not d.dynamic]
        args += [sym(prm.name) for prm in self.spec.static_params]
        self.dtype_src = {}
        for tname, t in self.spec.inputs.items():
            kf = self.tensor_format(t)
            if kf is not None:
                self.dtype_src[tname] = repr(self.format_storage(t))
                tensors.append((tname, self.shape_src(t, packed=True), self.dtype_src[tname]))
                if kf[0] == "element" and not kf[1].pack:
                    dispatch.append((f"LOAD_{tname}", tname, {kf[1].name: self.loader(kf[1].name)}))
                continue
            if t.like:
                self.dtype_src[tname] = self.dtype_src[t.like]
            elif len(t.dtypes) > 1:
                args.append(f"{tname}_dtype")
                storages.append((tname, {dt: self.storage(dt) for dt in t.dtypes}))
                self.dtype_src[tname] = f"STORAGE_{tname}"
            else:
                self.dtype_src[tname] = repr(self.storage(t.dtypes[0]))
            if t.optional and not self.variant.get(f"?{tname}"):
                continue            # absent in this variant: not a kernel argument
            dispatch.append((f"LOAD_{tname}", t.like or tname, {dt: self.loader(dt) for dt in t.dtypes}))
            tensors.append((tname, self.shape_src(t), self.dtype_src[tname]))
        for tname in sorted(p.rounds):
            dispatch.append((f"ROUND_{tname}", tname, {dt: self.rounder(dt) for dt in self.spec.inputs[tname].dtypes}))
        for tname, t in self.spec.outputs.items():
            if tname not in p.outputs:
                continue            # an output this variant does not write
            if t.like and p.outputs[tname].dtype != RAW:     # computed values in the dtype of `like`
                dispatch.append((f"STORE_{tname}", t.like,
                                 {dt: f"lambda v: {self.encode_format(self.catalog.elements[dt], 'v')}" for dt in t.dtypes}))
            tensors.append((tname, self.shape_src(t, packed=True), self.output_storage(t)))
        for t in self.spec.outputs.values():
            # a store packs the codes of one tile; a load reads each code at its flat position (any split)
            pk = self.packing(t)
            if pk and len(t.view[-1]) > 1:
                axis = t.view[-1][-1]
                checks.append((f"N_{axis} % {pk.codes} == 0",
                               f"{t.name}: {pk.codes} codes share a word, so they must not straddle axis {axis}"))
        self.printer = TileLangPrinter(self._var_src)
        stored = {v.name: tname for tname, v in p.outputs.items()}
        for st in p.steps:
            out = st.out
            if isinstance(st, (Load, Copy)):
                elem = f"{st.tensor}[{self.tensor_index(self.spec.inputs[st.tensor], getattr(st, 'fixed', ()))}]"
                if isinstance(st, Copy):          # stored elements, moved as they are
                    self.buffer(out, self.dtype_src[st.tensor])
                    load, zero = elem, f"T.cast(0, {self.dtype_src[st.tensor]})"
                else:
                    self.buffer(out)
                    load = self.load_src(st.tensor, self.spec.inputs[st.tensor], getattr(st, "fixed", ()))
                    zero = "T.float32(0.0)" if out.dtype == "f32" else "T.int32(0)"
                g = self.row_guard(out.axes)
                # each load in a loop of its own: TileLang then vectorizes it to 16 bytes on sm_90a (a loop
                # that also loads or computes other tiles gets 8-byte accesses)
                self.current = None
                loop = self.loop_for(out.axes)
                if isinstance(load, tuple):
                    # a packed element: its code is gathered into a u32 tile first, so that the decoder,
                    # which reads its argument several times, repeats a register read and not the
                    # unpacking loads (TVM took a minute to lower an e5m6 decode of an unpacked window).
                    # Code 0 decodes to +0.0, the value of rows past the end
                    code_src, decode = load
                    code = self.buffer_named(f"{out.name}_code", out.axes, '"uint32"')
                    loop.assigns.append((code, f"T.if_then_else({g}, {code_src}, T.uint32(0))" if g else code_src))
                    loop.assigns.append((self.elem(out), f"{decode}({code})"))
                else:
                    loop.assigns.append((self.elem(out), f"T.if_then_else({g}, {load}, {zero})" if g else load))
                self.current = None
            elif isinstance(st, Map):
                self.helpers |= {n for n in ir.call_names(st.expr) if not n.startswith("ROUND_")}
                if out.name in stored and out.name not in consumers:
                    self.inlined[out.name] = st.expr      # computed where it is stored
                else:
                    self.buffer(out)
                    self.loop_for(out.axes).assigns.append((self.elem(out), self.printer(st.expr)))
            elif isinstance(st, Reduce):
                src = self.reduce_source(st)
                self.buffer(out)
                self.add_item(ReduceItem(f"T.reduce_{st.kind}", src, self.buffers[out.name],
                                         st.src.axes.index(st.axis)))
            elif isinstance(st, TopK):
                self.add_item(self.topk(st, stored))
                continue
            elif isinstance(st, Gather):
                self.buffer(out)
                self.current = None
                self.loop_for(out.axes).assigns.append((self.elem(out), self.gather_src(st)))
                self.current = None
            elif isinstance(st, Count):
                self.buffer(out)
                self.count(st)
            if p.keep is not None and out.name == p.keep.name:
                self.kept(out)
            if out.name in stored:
                self.store(stored[out.name], out)
        return KernelPlan(name, args, pre, checks, storages, dispatch, tensors,
                          *self.grid(), self.knobs, self.allocs, self.body,
                          sorted(self.helpers))

    def grid(self):
        """The launch grid. Several tiled axes share one flat block index in row-major order, so blocks
        that run one after another touch neighbouring memory (and no axis hits the 65535 limit of grid y/z)."""
        exts = [f"T.ceildiv(N_{a}, B_{a})" for a in self.tiled]
        if len(exts) < 2:
            return [(f"b_{a}", e) for a, e in zip(self.tiled, exts)], []
        ids = []
        for i, a in enumerate(self.tiled):
            inner = " * ".join(exts[i + 1:])
            idx = f"pid // ({inner})" if inner else "pid"
            ids.append((f"b_{a}", f"{idx} % {exts[i]}" if i else idx))
        return [("pid", " * ".join(exts))], ids

    def buffer(self, value, dtype=None):
        """A tile buffer for a value; never named like a kernel argument (an output keeps its name).
        `dtype`: the source of its TileLang dtype, when it is not the value's (copied elements)."""
        name = value.name + "_tile" if value.name in self.spec.tensors else value.name
        self.buffers[value.name] = name
        self.allocs.append((name, self.tile_shape(value.axes), dtype or f'"{_alloc_dtype(value.dtype)}"', self.alloc))

    def buffer_named(self, name, axes, dtype_src):
        """A tile of its own (not a value's), returned as its element at the loop variables."""
        self.allocs.append((name, self.tile_shape(axes), dtype_src, self.alloc))
        return f"{name}[{', '.join(f'i_{a}' for a in axes)}]"

    def reduce_source(self, st):
        """The buffer a reduction reads. Over a padded axis, padding must hold the reduction's neutral
        value: loads fill padding with 0, which serves absmax and sum of loaded values; anything else
        is reduced from a masked copy. On a target whose max does not skip NaN (the C target's keeps
        whichever operand its comparison picks, so a NaN last in a row wins), max-type reductions read a
        copy with NaNs replaced by the neutral value: every target then skips NaN, as the reference does."""
        src = self.buffers[st.src.name]
        idx = ", ".join(f"i_{a}" for a in st.src.axes)
        value = f"{src}[{idx}]"
        if st.src.dtype == ir.I32:
            neutral = {"max": "T.int32(-2147483648)", "min": "T.int32(2147483647)"}[st.kind]
        else:
            neutral = {"absmax": "T.float32(0.0)", "sum": "T.float32(0.0)", "max": "T.float32(-T.infinity('float32'))",
                       "min": "T.infinity('float32')"}[st.kind]
        if st.kind != "sum" and st.src.dtype != ir.I32 and not self.arch.max_skips_nan:
            value = f"T.if_then_else(T.isnan({value}), {neutral}, {value})"
        rows = st.axis in (self.spec.row_inner, self.dyn_axis)
        if st.axis in self.padded or rows:
            if not (st.kind in ("absmax", "sum") and self._zero_filled(st.src.name)):
                # rows past the dynamic size in the last row block (with the padding, where the row axis is
                # padded too), or the padding of a padded axis
                guard = self.row_guard(st.src.axes) if rows else f"i_{st.axis} < N_{st.axis}"
                value = f"T.if_then_else({guard}, {value}, {neutral})"
        if value == f"{src}[{idx}]":
            return src
        masked = f"{src}_for_{st.kind}_over_{st.axis}"        # the guard depends on the axis reduced
        if all(name != masked for name, *_ in self.allocs):     # else a second, identical reduction
            self.allocs.append((masked, self.tile_shape(st.src.axes), f'"{_alloc_dtype(st.src.dtype)}"', self.alloc))
            self.add_item(Loop(self.loop_axes(st.src.axes), assigns=[(f"{masked}[{idx}]", value)]))
        return masked

    def _zero_filled(self, name):
        """Whether a value is zero wherever a load was masked: a load, or an absmax or sum of one."""
        step = next(x for x in self.program.steps if x.out.name == name)
        return isinstance(step, (Load, Gather)) or (isinstance(step, Reduce) and step.kind in ("absmax", "sum")
                                          and self._zero_filled(step.src.name))

    def _sources(self, st):
        if isinstance(st, Map):
            return ir.var_names(st.expr)
        if isinstance(st, (Reduce, TopK)):
            return {st.src.name}
        if isinstance(st, Count):
            return ir.var_names(st.expr)
        if isinstance(st, Gather):
            return {st.index.name}
        return set()

    def elem(self, value, at=None):
        """A tile element of `value` at the loop variables (or at `at`: axis -> index source)."""
        at = at or {}
        return f"{self.buffers[value.name]}[{', '.join(at.get(a, f'i_{a}') for a in value.axes) or '0'}]"

    def value_src(self, value, at=None):
        """Source of a value's element: its buffer, or its expression when it was inlined."""
        if value.name in self.inlined:
            return TileLangPrinter(lambda v: self._var_src(v) if v.name in self.program.scalars or v.name[0] == "#"
                                   else self.value_src(self.program.values[v.name], at))(self.inlined[value.name])
        return self.elem(value, at)

    def _var_src(self, v: ir.Var):
        if v.name.startswith("#"):          # an axis index (join)
            return self.gidx(v.name[1:])
        if v.name in self.program.scalars:
            return f"T.float32({sym(v.name)})"
        return self.value_src(self.program.values[v.name])

    def tile_shape(self, axes):
        """A tile's shape; a value over no axes (a count) is one element."""
        return "(" + ", ".join(f"B_{a}" for a in axes) + ("," if len(axes) < 2 else "") + ")" if axes else "(1,)"

    def shape_src(self, t, packed=False):
        if t.at:
            return f"(n_{t.name},)"        # passed flat: positions index its elements
        dims = [py_expr(s) for s in t.shape]
        pk = self.packing(t) if packed else None
        if pk:
            dims[-1] = f"T.ceildiv({dims[-1]}, {pk.codes})" + (f" * {pk.words}" if pk.words > 1 else "")
        lay = self.layout(t)
        if lay:
            pad = lay.pad_elems(_BYTES[self.format_storage(t)])
            dims = [dims[1], f"T.ceildiv({dims[0]}, {pad}) * {pad}"]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    def format_storage(self, t):
        """TileLang dtype of a tensor declared with a format: the packing word, or the format's storage."""
        kind, fmt = self.tensor_format(t)
        pk = self.packing(t)
        if pk:
            return pk.word
        if kind == "scale":
            return fmt.torch_dtype
        return self.storage(fmt.name)

    def output_storage(self, t):
        """Source of the TileLang dtype an output is stored as."""
        if t.like:
            return self.dtype_src[t.like]
        if self.tensor_format(t) is not None:
            return repr(self.format_storage(t))
        return repr(self.storage(t.dtypes[0]))

    def load_src(self, tname, t, fixed=()):
        """Source of one element of an input as float32 (or int32): decoded, unpacked where packed; for a
        packed element format, (source of its u32 code, name of its decoder). `fixed` pins axes to constant
        indices (a `take`)."""
        kf = self.tensor_format(t)
        if kf is None or (kf[0] == "element" and not kf[1].pack):
            return f"LOAD_{tname}({tname}[{self.tensor_index(t, fixed)}])"
        kind, fmt = kf
        pk = self.packing(t)
        if pk:
            code = self.unpack_src(tname, t, pk, fixed)
        elif fmt.store == "float":
            return f"{tname}[{self.tensor_index(t, fixed)}]"
        else:
            code = f'T.cast({tname}[{self.tensor_index(t, fixed)}], "uint32")'
        if kind == "element":
            self.helpers.add(f"decode_{fmt.name}")
            return (code, f"decode_{fmt.name}") if pk else f"decode_{fmt.name}({code})"
        return f'T.reinterpret(({code}) << T.uint32(23), "float32")'     # a UE8M0 byte: 2^(byte - 127)

    def unpack_src(self, tname, t, pk, fixed=()):
        """Source of the u32 code of the current element of a packed input. Its bit offset in the packet
        is linear in its index j within the packet; the code is read from the word holding its lowest bit
        and, where it crosses into the next word, that word too (a 64-bit window). Two loads and a few
        integer operations, rather than a select over the packet's codes, which TVM lowers slowly."""
        at = {a: str(i) for a, i in fixed}
        parts = [self.group_index(g, at) for g in t.view]
        e, n, wb, width = parts[-1], pk.codes, pk.word_bits, pk.width

        def word(k):
            at = ", ".join(parts[:-1] + [f"({e}) // {n} * {pk.words} + {k}"])
            return f'(T.cast({tname}[{at}], "uint32") & T.uint32({(1 << wb) - 1:#x}))'
        j = f"(({e}) % {n})"             # signed index arithmetic: TVM's simplifier rejects u32 0 - x
        off = f"({j} * {width})" if pk.order == "lsb_first" else f"({pk.total - width} - {j} * {width})"
        mask = f"T.uint32({(1 << width) - 1:#x})"
        if pk.words == 1:
            return f'(({word(0)} >> T.cast({off}, "uint32")) & {mask})'
        low = f"({off} // {wb})"                       # the low word, counted from the packet's lsb
        k, k_next = ((low, f"T.min({low} + 1, {pk.words - 1})") if pk.order == "lsb_first" else
                     (f"({pk.words - 1} - {low})", f"(T.max({pk.words - 1} - {low}, 1) - 1)"))
        window = f'(T.cast({word(k)}, "uint64") | (T.cast({word(k_next)}, "uint64") << T.uint64({wb})))'
        return f'T.cast(({window} >> T.cast({off} % {wb}, "uint64")) & T.uint64({(1 << width) - 1:#x}), "uint32")'

    def store(self, tname, v):
        t = self.spec.outputs[tname]
        src = self.value_src(v)
        kf = self.tensor_format(t)
        pk = self.packing(t)
        if kf and kf[0] == "scale":
            if kf[1].store == "exponent_byte":
                src = _exponent_byte(src)
                if not pk:
                    src = f'T.cast({src}, "uint8")'
        elif pk:
            self.helpers.add(f"encode_{kf[1].name}")
            src = f"encode_{kf[1].name}({src})"
        else:
            src = src if v.dtype == RAW else self.encode_store(t, src)
        if tname in self.program.at:
            return self.store_at(tname, v, src)
        if self.accumulates(v):
            # a sum over the rows or a count of every block: each block adds its part (the output starts at 0)
            self.loop_for(v.axes).stores.append((None, f"T.atomic_add({tname}[{self.tensor_index(t)}], {src})"))
            return
        if pk:
            return self.store_packed(tname, t, v, pk, src)
        if not t.scale_ref and t.axes[-1] != v.axes[-1]:
            return self.store_transposed(tname, t, v, src)
        self.loop_for(v.axes).stores.append((f"{tname}[{self.tensor_index(t)}]", src))

    def accumulates(self, v):
        """Whether a value is a sum over the dynamic axis or a count (outputs of it are accumulated across
        blocks)."""
        return v.name in self.program.counts or any(
            isinstance(st, Reduce) and st.out.name == v.name and st.axis == self.dyn_axis for st in self.program.steps)

    def store_transposed(self, tname, t, v, src):
        """An output whose innermost dim is not the tile's innermost axis. The encoded tile is staged in
        shared memory in the tile's own order, written by a loop like any direct store (so the tile keeps
        its vectorized layout), then read across and stored by a loop over the output's order, so that
        consecutive threads write consecutive addresses (a direct store would scatter single elements)."""
        stage = f"{tname}_staged"
        dtype = self.output_storage(t)
        # rows padded by 16 bytes: 16-byte vectors stay aligned and the reads across rows spread over banks
        shape = self.tile_shape(v.axes)[:-1].rstrip(",") + f" + bank_pad({dtype}),)"
        self.allocs.append((stage, shape, dtype, self.shared))
        self.buffers[stage] = stage
        elem = f"{stage}[{', '.join(f'i_{a}' for a in v.axes)}]"
        self.loop_for(v.axes).assigns.append((elem, src))
        loop = Loop(self.loop_axes(t.axes), guard=self.row_guard(t.axes))
        loop.stores.append((f"{tname}[{self.tensor_index(t)}]", elem))
        self.add_item(loop)

    def store_packed(self, tname, t, v, pk, code_src):
        """Pack `pk.codes` consecutive codes along the tensor's innermost axis into `pk.words` words.

        The codes are staged in shared memory on GPUs, where a word gathers codes that other threads
        computed (one thread needs no sharing, and the C backend allows one shared buffer). Codes past the
        axis's extent (a last, partial packet) are zero.
        """
        axis, n = t.view[-1][-1], pk.codes
        stage = f"{tname}_codes"
        self.allocs.append((stage, self.tile_shape(v.axes), '"uint32"', self.shared))
        self.buffers[stage] = stage
        self.loop_for(v.axes).assigns.append((f"{stage}[{', '.join(f'i_{a}' for a in v.axes)}]", code_src))
        guard = self.row_guard([a for a in v.axes if a != axis])
        if axis in self.padded:     # packets that lie wholly in the padding are not stored
            guard = " & ".join(f"({g})" for g in (guard, f"i_{axis}p * {n} < N_{axis}") if g)
        loop = Loop([(f"i_{a}p" if a == axis else f"i_{a}", f"T.ceildiv(B_{a}, {n})" if a == axis else f"B_{a}")
                     for a in v.axes], guard=guard)
        packet = f"b_{axis} * T.ceildiv(B_{axis}, {n}) + i_{axis}p" if axis in self.tiled else f"i_{axis}p"
        group = t.view[-1]
        if len(group) > 1:
            packet = f"{self.group_index(group[:-1])} * T.ceildiv(N_{axis}, {n}) + {packet}"
        for k in range(pk.words):
            terms = []
            for j, r, bits, sh in pk.word_pieces(k):
                local = f"i_{axis}p * {n} + {j}"
                glob = f"b_{axis} * B_{axis} + {local}" if axis in self.tiled else local
                code = f"{stage}[{', '.join(local if a == axis else f'i_{a}' for a in v.axes)}]"
                term = f"T.if_then_else({glob} < N_{axis}, {code}, T.uint32(0))"
                if r:
                    term = f"({term} >> T.uint32({r}))"
                if r + bits < pk.width:
                    term = f"({term} & T.uint32({(1 << bits) - 1}))"
                terms.append(f"({term} << T.uint32({sh}))")
            word = " | ".join(terms)
            word = f'T.reinterpret({word}, "{pk.word}")' if pk.word_bits == 32 else f'T.cast({word}, "{pk.word}")'
            at = f"({packet}) * {pk.words} + {k}" if pk.words > 1 else packet
            index = self.at(t, [at if grp is group else self.group_index(grp) for grp in t.view])
            loop.stores.append((f"{tname}[{index}]", word))
        self.add_item(loop)

    def topk(self, st, stored):
        """Top-k as k rounds of two 32-bit reductions: the largest order key, then the smallest index holding it.

        (One reduction over int64 keys packing the index into the low word was tried: 9% slower on an H200
        for 256 experts, k = 8, since every step of it is two shuffles and a 64-bit compare.)
        """
        src, over, new = st.src, st.over, st.new
        rest = [a for a in src.axes if a != over]
        names = {k: f"{st.out.name}_{k}" for k in ("key", "cand", "best", "pick")}
        for k, axes in (("key", src.axes), ("cand", src.axes), ("best", rest), ("pick", rest)):
            self.allocs.append((names[k], self.tile_shape(axes), '"int32"', self.alloc))
        key_fn = topk_key()
        self.helpers.add(key_fn.name)
        tname = stored.get(st.out.name)
        if tname is None:
            raise ValueError("a top-k result must be an output of the op (gathering through it is not supported yet)")
        t = self.spec.outputs[tname]
        rhs = self.encode_store(t, f"{names['pick']}[{', '.join(f'i_{a}' for a in rest)}]")
        key_elem = f"{names['key']}[{', '.join(f'i_{a}' for a in src.axes)}]"
        key = f"{key_fn.name}({self.value_src(src)})"
        if over in self.padded:   # padding ranks below every real key, so it is never picked (k <= extent)
            key = f"T.if_then_else(i_{over} < N_{over}, {key}, T.int32(-2147483648))"
        self.loop_for(src.axes).assigns.append((key_elem, key))
        return TopKItem(self.loop_axes(src.axes), self.loop_axes(rest), names["key"], names["cand"], names["best"],
                        names["pick"], f"i_{over}", f"N_{over}", f"N_{new}", f"i_{new}",
                        f"{tname}[{self.tensor_index(t)}]", rhs,
                        self.row_guard(rest), src.axes.index(over))


_BYTES = {"float32": 4, "int32": 4, "uint32": 4, "int16": 2, "uint16": 2, "bfloat16": 2, "int8": 1, "uint8": 1,
          "float8_e4m3fn": 1, "float8_e5m2": 1}


def _exponent_byte(src):
    return f'((T.reinterpret({src}, "uint32") >> T.uint32(23)) & T.uint32(255))'


def _alloc_dtype(dt):
    return {"f32": "float32", "i32": "int32", "u32": "uint32", "bool": "bool"}[dt]


def topk_key() -> ir.Function:
    """float32 -> int32 key whose integer order is the order of a stable descending sort on floats.

    -0.0 becomes +0.0 (they tie) and every NaN becomes one canonical NaN that ranks above +inf.
    """
    b = ir.Builder()
    x = ir.Var("x", ir.F32)
    # isnan, not `x != x`: compilers may fold the self-comparison to false. (Testing the bits instead made
    # TileLang's lowering of the top-k loop ten times slower.)
    canon = ir.op("select", ir.op("isnan", x), ir.op("from_bits", ir.u32(0x7FC00000)),
                  ir.op("select", ir.op("eq", x, ir.c(0.0)), ir.c(0.0), x))
    s = b.let("s", ir.op("u32_to_i32", ir.op("bits", canon)))
    key = ir.op("select", ir.op("lt", s, ir.Const(0, ir.I32)), ir.op("bitxor", s, ir.Const(0x7FFFFFFF, ir.I32)), s)
    return ir.Function("order_key", (x,), tuple(b.lets), key, "float32 -> int32 key ordered like a stable sort")
