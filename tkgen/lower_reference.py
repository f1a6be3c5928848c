"""Stage 3b: lower one variant's Program to a plain-PyTorch reference (the test oracle of its kernels).

Every value is a whole tensor whose dims are the value's axes in the op's axis order; elementwise IR is
printed with explicit broadcasting; reductions and top-k use torch ops; outputs go through the same
generated software encoders as the CPU kernel. No tiling, no target knobs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from . import expr as E
from . import ir
from .lower_kernel import py_expr, sym, topk_key
from .model import binding
from .printers import TorchPrinter
from .stages import RAW, Copy, Count, Gather, Load, Map, Reduce, TopK

# max-type reductions skip NaN (IEEE maxNum, as CUDA's fmaxf; the C target is made to agree)
_REDUCE = {"absmax": "_absmax({src}, {dim})", "max": "_nanmax({src}, {dim})", "min": "_nanmin({src}, {dim})",
           "sum": "{src}.sum(dim={dim})"}


@dataclass
class ReferencePlan:
    name: str
    args: List[str]
    binds: List[tuple]
    lines: List[tuple] = field(default_factory=list)      # (kind, data)
    returns: List[str] = field(default_factory=list)
    helpers: set = field(default_factory=set)
    rows: "ReferencePlan" = None           # keep_rows: the function giving the rows the kernel writes
    single: bool = False                   # returns one tensor, not a tuple
    device_of: str = ""                    # the first required input: where the reference computes


def _bcast(value_axes, target_axes):
    """Indexing that lifts a tensor over `value_axes` to broadcast against `target_axes`."""
    if tuple(value_axes) == tuple(target_axes):
        return ""
    return "[" + ", ".join(":" if a in value_axes else "None" for a in target_axes) + "]"


class _ReferenceLowering:
    def __init__(self, spec, program, variant, catalog):
        self.spec, self.program, self.variant, self.catalog = spec, program, variant, catalog
        self.keep = None             # the kept-rows value, once computed: later row data is masked by it

    def device_of(self):
        """The input whose device the reference computes on: the first required one (never None)."""
        return next(n for n, t in self.spec.inputs.items() if not t.optional)

    def build(self, name):
        spec, p = self.spec, self.program
        args = [n for n in spec.inputs] + [sym(x.name) for x in spec.static_params] + ["_given=None"]
        binds, bound = [], set()
        # sizes bind from required inputs first: an optional one may be None
        for tname, t in sorted(spec.inputs.items(), key=lambda kv: kv[1].optional):
            if t.optional and not self.variant.get(f"?{tname}"):
                continue
            num, den = self.container_ratio(t)
            for i, s in enumerate(t.shape):
                b = binding(s, spec.dims)
                if not b or b[0] in bound:
                    continue
                last = i == len(t.shape) - 1 and (num, den) != (1, 1)
                if last and t.scale_ref:
                    continue                  # packed scales may end in a partial word
                size = f"{tname}.shape[{i}] * {den} // {num}" if last else f"{tname}.shape[{i}]"
                binds.append((sym(b[0]), f"({size}) // {b[1]}" if b[1] > 1 else size))
                bound.add(b[0])
        for ax_name, ax in spec.axes.items():
            binds.append((f"N_{ax_name}", py_expr(ax.extent, tl=False)))
        for tname in sorted(p.rounds):
            table = ", ".join(f"torch.{self.catalog.elements[dt].torch_dtype}: "
                              f"{'_same' if self.catalog.elements[dt].is_float32 else 'round_' + dt}"
                              for dt in spec.inputs[tname].dtypes)
            binds.append((f"ROUND_{tname}", f"{{{table}}}[{tname}.dtype]"))
        plan = ReferencePlan(name, args, binds, device_of=self.device_of())
        plan.helpers |= {f"round_{dt}" for t in p.rounds for dt in spec.inputs[t].dtypes
                         if not self.catalog.elements[dt].is_float32}
        if p.keep is not None:
            plan.rows = self.rows_plan(name.replace("reference_", "written_rows_"), args, binds)
        given = {g for t in spec.outputs.values() if isinstance(t.exact, dict) for g in t.exact.get("given", ())}
        stored = {v.name: tname for tname, v in p.outputs.items()}
        for st in p.steps:
            out = st.out
            self.step(st, plan)
            if stored.get(out.name) in given:
                # the kernel's value of this output replaces the reference's, so that what follows is
                # compared bit for bit (exact: {given: [...]})
                plan.lines.append(("assign", out.name, f"_given[{stored[out.name]!r}].to(torch.float32).reshape"
                                   f"({out.name}.shape) if _given and {stored[out.name]!r} in _given else {out.name}"))
        for tname, t in spec.outputs.items():
            if tname not in p.outputs:
                dt = f"{t.like}.dtype" if t.like else f"torch.{self.container(t)}"
                plan.returns.append(f"torch.empty(0, dtype={dt}, device=_dev)")
                continue
            src = self.store(t, p.outputs[tname], plan.helpers)
            pad = col_pad(self.catalog, spec, t, self.variant)
            plan.returns.append(f"_col_major({src}, {pad})" if pad else src)
        return plan

    def rows_plan(self, name, args, binds):
        """The function giving the rows a kernel writes (keep_rows), from the steps the condition needs."""
        p = self.program
        need, lines = {p.keep.name}, ReferencePlan(name, args, binds, device_of=self.device_of())
        for st in reversed(p.steps[:[s.out.name for s in p.steps].index(p.keep.name) + 1]):
            if st.out.name in need:
                need |= ir.var_names(st.expr) if isinstance(st, Map) else set()
        for st in p.steps:
            if st.out.name in need:
                self.step(st, lines)
        self.keep = None
        lines.returns.append(p.keep.name)
        lines.single = True
        return lines

    def masked(self, src, axes):
        """Row data after keep_rows, zero in the rows that are not kept (the kernel does not read them)."""
        dyn = next(iter(self.spec.axes))
        if self.keep is None or dyn not in axes:
            return src
        return f"_kept({src}, {self.keep}{_bcast((dyn,), axes)})"

    def step(self, st, plan):
        """The lines of one step. Once the kept rows are known, row data is zero in the others (loads,
        gathers), and counts leave them out."""
        spec, out = self.spec, st.out
        dyn = next(iter(spec.axes))
        if isinstance(st, (Load, Copy)):
            src = self.load(spec.inputs[st.tensor], st.tensor, out, plan.helpers, getattr(st, "fixed", ()),
                            raw=isinstance(st, Copy))
            plan.lines.append(("assign", out.name, self.masked(src, out.axes)))
        elif isinstance(st, Gather):
            conv = "torch.int64" if out.dtype == "i32" else "torch.float32"
            plan.lines.append(("assign", out.name, self.masked(
                f"_gather_at({st.tensor}.to({conv}).reshape(-1), {st.index.name})", out.axes)))
        elif isinstance(st, Count):
            cond = TorchPrinter(lambda v, axes=st.axes: self._var(v, axes))(st.expr)
            if self.keep is not None:
                cond = f"({cond}) & {self.keep}{_bcast((dyn,), st.axes)}"
            shape = "(" + ", ".join(f"N_{a}" for a in st.axes) + ("," if len(st.axes) == 1 else "") + ")"
            plan.lines.append(("assign", out.name, f"_count({cond}, {shape})"))
        elif isinstance(st, Map):
            printer = TorchPrinter(lambda v, axes=out.axes: self._var(v, axes))
            plan.helpers |= {n for n in ir.call_names(st.expr) if not n.startswith("ROUND_")}
            plan.lines.append(("assign", out.name, printer(st.expr)))
        elif isinstance(st, Reduce):
            plan.lines.append(("assign", out.name,
                               _REDUCE[st.kind].format(src=self.reduce_source(st), dim=st.src.axes.index(st.axis))))
        elif isinstance(st, TopK):
            key = topk_key()
            plan.helpers.add(key.name)
            stack_dim = out.axes.index(st.new)
            plan.lines.append(("topk", dict(out=out.name, key=f"{key.name}({st.src.name})",
                                            over=st.src.axes.index(st.over), n_over=f"N_{st.over}",
                                            n_new=f"N_{st.new}", stack_dim=stack_dim,
                                            index_shape=self._index_shape(st.src.axes, st.over))))
        if self.program.keep is not None and out.name == self.program.keep.name:
            self.keep = out.name

    def reduce_source(self, st):
        """Rows past the dynamic size in the last row block hold the reduction's neutral value, as in the
        kernel (loads fill them with zero, and the kernel masks them for other reductions)."""
        b, r = next(iter(self.spec.axes)), self.spec.row_inner
        if st.src.dtype == ir.I32:
            neutral = {"max": "_t(-2147483648)", "min": "_t(2147483647)"}[st.kind]
        else:
            neutral = "_f32({})".format({"absmax": "0.0", "sum": "0.0", "max": "-float('inf')", "min": "float('inf')"}[st.kind])
        if st.axis == b and self.keep is not None:      # rows not kept add nothing (the kernel masks them)
            return f"torch.where({self.keep}{_bcast((b,), st.src.axes)}, {st.src.name}, {neutral})"
        if st.axis != r:
            return st.src.name
        rows = f"_rows_valid(N_{b}, N_{r}, {sym(self.spec.dynamic_dim)}, _dev){_bcast((b, r), st.src.axes)}"
        return f"torch.where({rows}, {st.src.name}, {neutral})"

    def row_dims(self, t):
        """Tensor dims indexed by [row block, row]: the dynamic dim, padded to whole row blocks inside."""
        b, r = next(iter(self.spec.axes)), self.spec.row_inner
        return [i for i, group in enumerate(t.view) if r is not None and tuple(group) == (b, r)]
    def _var(self, v, axes):
        if v.name.startswith("#"):          # an axis index (join)
            a = v.name[1:]
            return f"torch.arange(N_{a}, device=_dev).reshape({', '.join('-1' if x == a else '1' for x in axes)})"
        if v.name in self.program.scalars:
            return f"_f32(float({sym(v.name)}))"
        return v.name + _bcast(self.program.values[v.name].axes, axes)

    def container(self, t):
        if t.format_ref:
            return self.catalog.resolve_format(self.spec, t.format_ref, self.variant, "element").torch_dtype
        if t.scale_ref:
            return self.catalog.resolve_format(self.spec, t.scale_ref, self.variant, "scale").torch_dtype
        return t.dtypes[0] if t.dtypes[0] in ("int32", "int64") else self.catalog.elements[t.dtypes[0]].torch_dtype

    def container_ratio(self, t):
        if t.format_ref:
            return self.catalog.resolve_format(self.spec, t.format_ref, self.variant, "element").container_ratio()
        if t.scale_ref:
            fmt = self.catalog.resolve_format(self.spec, t.scale_ref, self.variant, "scale")
            return (1, fmt.per_word)
        return 1, 1

    def _index_shape(self, axes, over):
        return "(" + ", ".join(f"N_{a}" if a == over else "1" for a in axes) + ("," if len(axes) == 1 else "") + ")"

    def view_shape(self, t):
        return "(" + ", ".join(f"N_{a}" for a in t.axes) + ("," if len(t.axes) == 1 else "") + ")"

    def load(self, t, name, value, helpers, fixed=(), raw=False):
        dt = t.dtypes
        if t.format_ref or t.scale_ref:
            conv = self.load_format(t, name, helpers)
        else:
            conv = f"{name}.to(torch.int64)" if all(d in ("int32", "int64") for d in dt) else f"{name}.to(torch.float32)"
        conv = name if raw else conv     # copied elements keep their dtype and bits
        b, r = next(iter(self.spec.axes)), self.spec.row_inner
        for i in self.row_dims(t):
            conv = f"_pad_dim({conv}, {i}, N_{b} * N_{r})"
        src = f"{conv}.reshape{self.view_shape(t)}"
        axes = list(t.axes)
        for a, i in fixed:
            src += f".select({axes.index(a)}, {i})"
            axes.remove(a)
        perm = [axes.index(a) for a in value.axes]
        return src + (f".permute{tuple(perm)}" if perm != sorted(perm) else "")

    def load_format(self, t, name, helpers):
        """An input declared with a format, as float32: unpacked, then decoded (elements through the
        generated decoder, as the CPU kernel does; UE8M0 bytes as 2^(byte - 127))."""
        if t.format_ref:
            fmt = self.catalog.resolve_format(self.spec, t.format_ref, self.variant, "element")
            if fmt.is_float32:
                return f"{name}.to(torch.float32)"
            helpers.add(f"decode_{fmt.name}")
            codes = f"_unpack_codes({name}, {fmt.pack.key()!r})" if fmt.pack else f"_codes_of({name})"
            return f"decode_{fmt.name}({codes})"
        fmt = self.catalog.resolve_format(self.spec, t.scale_ref, self.variant, "scale")
        if fmt.store == "float":
            return f"{name}.to(torch.float32)"
        codes = f"_codes_of({name})"
        if fmt.pack:
            codes = f"_unpack_codes({name}, {fmt.packing.key()!r})[..., :{py_expr(t.shape[-1])}]"
        return f"_from_bits({codes} << 23)"

    def store(self, t, value, helpers):
        src = value.name
        if t.name in self.program.at:      # added at its positions (valid ones, kept rows) into zeros
            shape = "(" + ", ".join(py_expr(s, tl=False) for s in t.shape) + ("," if len(t.shape) == 1 else "") + ")"
            keep = f", {self.keep}" if self.keep else ""
            return self._store(t, f"_add_at({src}, {self.program.at[t.name]}, {shape}{keep})", shape, helpers)
        if t.name not in self.program.accumulated(next(iter(self.spec.axes))):
            src = self.masked(src, value.axes)      # rows the kernel leaves untouched are zero here
        perm = [value.axes.index(a) for a in t.axes]
        if perm != sorted(perm):
            src = f"{src}.permute{tuple(perm)}"
        rows = self.row_dims(t)
        b, r = next(iter(self.spec.axes)), self.spec.row_inner
        shape = "(" + ", ".join(f"N_{b} * N_{r}" if i in rows else py_expr(s, tl=False)
                                for i, s in enumerate(t.shape)) + ("," if len(t.shape) == 1 else "") + ")"
        trim = "".join(f".narrow({i}, 0, {sym(self.spec.dynamic_dim)})" for i in rows)
        return self._store(t, src, shape, helpers, raw=value.dtype == RAW) + trim

    def _store(self, t, src, shape, helpers, raw=False):
        if raw:      # copied elements; dense strides even where dims have size 1 (the result is viewed as bytes)
            return f"{src}.reshape{shape}.clone(memory_format=torch.contiguous_format)"
        if t.scale_ref:
            fmt = self.catalog.resolve_format(self.spec, t.scale_ref, self.variant, "scale")
            if fmt.store == "float":
                return f"{src}.reshape{shape}"
            byte = f"_exponent_byte({src}.reshape{shape})"
            if fmt.pack:
                return f"_pack_codes({byte}, {fmt.packing.key()!r}, torch.{fmt.pack['word']})"
            return f"{byte}.to(torch.uint8)"
        if t.like:
            table = []
            for dt in t.dtypes:
                fmt = self.catalog.elements[dt]
                if fmt.is_float32:
                    table.append(f"torch.{fmt.torch_dtype}: _same")
                else:
                    helpers.add(f"encode_{fmt.name}")
                    table.append(f"torch.{fmt.torch_dtype}: lambda v: _codes_as(encode_{fmt.name}(v), "
                                 f"torch.{fmt.storage}, torch.{fmt.torch_dtype})")
            return f"{{{', '.join(table)}}}[{t.like}.dtype]({src}).reshape{shape}"
        if t.format_ref or t.dtypes[0] not in ("int32", "int64"):
            fmt = (self.catalog.resolve_format(self.spec, t.format_ref, self.variant, "element") if t.format_ref
                   else self.catalog.elements[t.dtypes[0]])
            if fmt.is_float32:
                return f"{src}.reshape{shape}"
            helpers.add(f"encode_{fmt.name}")
            if fmt.pack:
                return f"_pack_codes(encode_{fmt.name}({src}).reshape{shape}, {fmt.pack.key()!r}, torch.{fmt.torch_dtype})"
            return f"_codes_as(encode_{fmt.name}({src}), torch.{fmt.storage}, torch.{fmt.torch_dtype}).reshape{shape}"
        return f"{src}.to(torch.{t.dtypes[0]}).reshape{shape}"


def col_pad(catalog, spec, t, variant):
    """The row padding (in elements) of an output stored column-major in this variant, else None."""
    if not t.layout_ref:
        return None
    lay = catalog.resolve_format(spec, t.layout_ref, variant, "layout")
    if lay.order != "col_major":
        return None
    from .formats import ITEMSIZE
    from .generate import output_dtype
    return lay.pad_elems(ITEMSIZE[output_dtype(catalog, spec, t, variant)])


def lower_reference(spec, program, variant, catalog, name):
    lowering = _ReferenceLowering(spec, program, variant, catalog)
    return lowering.build(name)
