"""Print a naive kernel-IR module as the plain-PyTorch reference of its variant (the test oracle).

The reference runs the same statements as the kernels, on whole tensors: a statement over axes computes
every index at once (a tensor with one dim per axis, in the statement's order, broadcast with `None`
indexing), reductions and loops are torch reductions and Python loops, and tensors are read and written
through their views (reshapes where the indices are a view, gathers and scatters where they are computed).
Expressions print through printers.TorchPrinter from the same trees as the kernels', so a kernel and its
reference perform the same float32 operations in the same order; outputs are encoded through the same
generated software codecs.
"""
from __future__ import annotations

from typing import List, Optional

from ..ir import prim as ir, kernel as kir
from ..spec import pyexpr as P
from ..ir.prim import F32, I32, I64, RAW, U32
from ..spec.checks import binding
from .printers import TorchPrinter
from ..spec.signature import INT_ELEMS, INT_STORAGE, TORCH_OF_DTYPE

_REDUCE = {"absmax": "_absmax", "max": "_nanmax", "min": "_nanmin", "sum": "_sum"}
_COMBINE = {"absmax": "torch.maximum", "max": "torch.maximum", "min": "torch.minimum", "sum": "torch.add"}


def _tuple(items) -> str:
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


class ReferencePrinter:
    """One naive module as a reference function's lines."""

    def __init__(self, catalog, spec, module: kir.Module):
        self.catalog, self.spec, self.m = catalog, spec, module
        self.sigs = module.sigs
        self.tensors = {t.name: t for t in module.tensors}
        self.bufs = kir.buffers(module.kernels[0].body)
        self.expr = TorchPrinter(self)
        self.axes: tuple = ()              # the axes of the statement being printed
        self.defined = set()
        self.helpers = set(module.helpers)
        self.given = {g for t in spec.outputs.values() if isinstance(t.exact, dict) for g in t.exact.get("given", ())}

    # -- element types ----------------------------------------------------------------------------------
    def torch_dtype(self, elem: str) -> str:
        if elem.startswith("@"):
            return f"{elem[1:]}.dtype"
        if elem in self.catalog.elements:
            fmt = self.catalog.elements[elem]
            return f"torch.{fmt.pack.word if fmt.pack else fmt.torch_dtype}"
        return f"torch.{TORCH_OF_DTYPE.get(elem, elem)}"

    def decode(self, elem: str, raw: str, dtype: str) -> str:
        if dtype == U32:
            return f"_codes_of({raw})"
        if elem in INT_ELEMS or elem in INT_STORAGE:
            return f"{raw}.to(torch.int64)"
        if elem.startswith("@") and dtype == I32:         # int32 or int64 at the call: carried as int32
            return f"_wrap_i32({raw}.to(torch.int64))"
        if elem.startswith("@") or elem == "float32":
            return f"{raw}.to(torch.float32)"
        fmt = self.catalog.elements[elem]
        if fmt.pack:
            self.helpers.add(f"decode_{elem}")
            return f"decode_{elem}({raw})"
        if fmt.torch_dtype.startswith(("float", "bfloat")):
            return f"{raw}.to(torch.float32)"          # exact: torch has the format
        self.helpers.add(f"decode_{elem}")
        return f"decode_{elem}(_codes_of({raw}))"

    def encode(self, elem: str, value: str, dtype: str) -> str:
        if elem.startswith("@"):
            table = []
            for dt in self.m.dtypes[elem[1:]]:
                table.append(f"torch.{TORCH_OF_DTYPE[dt]}: {self._encoder(dt)}")
            return f"{{{', '.join(table)}}}[{elem[1:]}.dtype]({value})"
        if elem in INT_ELEMS:
            return f"_t({value}).to(torch.{elem})"
        if elem in INT_STORAGE:
            return f"_codes_as({value}, torch.{elem}, torch.{elem})"
        if elem == "float32":
            return value
        fmt = self.catalog.elements[elem]
        if fmt.pack:
            self.helpers.add(f"encode_{elem}")
            return f"encode_{elem}({value})"
        return self._encoded(elem, value)

    def _encoded(self, dt: str, value: str) -> str:
        fmt = self.catalog.elements[dt]
        if fmt.is_float32:
            return value
        self.helpers.add(f"encode_{fmt.name}")
        return f"_codes_as(encode_{fmt.name}({value}), torch.{fmt.storage}, torch.{fmt.torch_dtype})"

    def _encoder(self, dt: str) -> str:
        return "_same" if self.catalog.elements[dt].is_float32 else f"lambda v: {self._encoded(dt, 'v')}"

    # -- memory nodes -----------------------------------------------------------------------------------
    def index(self, axis) -> str:
        return f"_ix({ir.extent_name(axis)}, {self.axes.index(axis)}, {len(self.axes)}, _dev)"

    def node(self, e, pr) -> str:
        if isinstance(e, ir.Index):
            return self.index(e.axis)
        if isinstance(e, ir.Size):
            return e.name
        if isinstance(e, ir.Scalar):
            return f"_f32(float({e.name}))" if e.dtype == F32 else f"int({e.name})"
        if isinstance(e, ir.Read):
            b = self.bufs[e.buffer]
            if e.indices is None:
                return b.name + _bcast(b.axes, self.axes)
            src = f"_take({b.name}, {_tuple(pr(i) for i in e.indices)}"
            return src + (f", {pr(e.guard)})" if e.guard is not None else ")")
        if isinstance(e, ir.Fetch):
            return self.fetch(e, pr)
        if isinstance(e, ir.Decode):
            arg = e.arg
            if isinstance(arg, ir.Fetch) and arg.guard is not None:
                inner = self.decode(e.elem, self.fetch(arg, pr, guarded=False), e.dtype)
                return f"torch.where({pr(arg.guard)}, {inner}, 0)"
            return self.decode(e.elem, pr(arg), e.dtype)
        if isinstance(e, ir.Encode):
            return self.encode(e.elem, pr(e.arg), e.arg.dtype)
        raise TypeError(e)

    def fetch(self, e: ir.Fetch, pr, guarded=True) -> str:
        """A tensor's elements: through its view (a reshape; rows of a partial row block read as zero), or
        gathered at computed indices. Unguarded here: the caller applies the guard after decoding."""
        if e.view is not None:
            src = self.viewed(e.tensor, e.view)
        else:
            idx = _tuple(pr(i) for i in e.indices)
            t = self.tensors.get(e.tensor)
            sig = self.sigs.get(e.tensor)
            name = e.tensor
            if t is not None and t.flat:
                name += ".reshape(-1)"
            elif sig is not None and sig.packing is not None and sig.container != sig.packing.word:
                name += f".view(torch.{sig.packing.word})"      # the words the kernel reads
            src = f"_gather({name}, {idx}, {pr(e.guard) if e.guard is not None and not guarded else 'None'})"
        if guarded and e.guard is not None:
            return f"torch.where({pr(e.guard)}, {src}, torch.zeros((), dtype={e.tensor}.dtype))"
        return src

    def viewed(self, tensor, view) -> str:
        """`tensor` read through a view: its storage dims, each split into the axes of its group (an
        (axis, index) item pins that axis: a take), arranged for the statement being printed."""
        sizes, flat, fixed, have = [], [], [], []
        for group in view:
            names = [g if isinstance(g, str) else g[0] for g in group]
            sizes.append(" * ".join(ir.extent_name(a) for a in names))
            for g in group:
                if not isinstance(g, str):
                    fixed.append(f"({len(flat)}, {g[1]})")
                else:
                    have.append(repr(g))
                flat.append(ir.extent_name(g if isinstance(g, str) else g[0]))
        return (f"_view({tensor}, {_tuple(sizes)}, {_tuple(flat)}, {_tuple(fixed)}, {_tuple(have)}, "
                f"{_tuple(repr(a) for a in self.axes)})")

    # -- statements -------------------------------------------------------------------------------------
    def shape(self, axes) -> str:
        return _tuple(ir.extent_name(a) for a in axes)

    def buffer_dtype(self, b: kir.Buffer) -> str:
        if b.dtype == RAW:
            return self.torch_dtype(b.elem)
        return {F32: "torch.float32", I32: "torch.int64", U32: "torch.int64", I64: "torch.int64",
                ir.BOOL: "torch.bool"}[b.dtype]

    def allocate(self, b: kir.Buffer, ind) -> str:
        self.defined.add(b.name)
        return f"{ind}{b.name} = torch.zeros({self.shape(b.axes)}, dtype={self.buffer_dtype(b)}, device=_dev)"

    def statement(self, st, ind) -> List[str]:
        if isinstance(st, kir.Nest):
            return [line for s in st.body for line in self.statement(s, ind)]
        if isinstance(st, kir.Compute):
            self.axes = st.axes
            value = self.expr(st.value)
            b = st.dst
            if st.at:
                lines = [] if b.name in self.defined else [self.allocate(b, ind)]
                (axis, idx), = st.at
                lines.append(f"{ind}{b.name}.select({b.axes.index(axis)}, {self.expr(idx)}).copy_(_fit({value}, "
                             f"{self.shape(st.axes)}))")
                return lines
            self.defined.add(b.name)
            if b.name in self.updated_in_place():
                # its slices are rewritten later: its own storage, not a view of the value it starts from
                return [f"{ind}{b.name} = _fit({value}, {self.shape(b.axes)}).clone()"]
            return [f"{ind}{b.name} = _fit({value}, {self.shape(b.axes)})"]
        if isinstance(st, kir.Store):
            return self.store(st, ind)
        if isinstance(st, kir.Reduce):
            dim = st.src.axes.index(st.axis)
            red = f"{_REDUCE[st.kind]}({st.src.name}, {dim})"
            if st.accumulate:
                red = f"{_COMBINE[st.kind]}({st.dst.name}, {red})"
            self.defined.add(st.dst.name)
            return [f"{ind}{st.dst.name} = {red}"]
        if isinstance(st, kir.Gemm):
            return self.gemm(st, ind)
        if isinstance(st, kir.Fill):
            self.defined.add(st.dst.name)
            return [f"{ind}{st.dst.name} = torch.full({self.shape(st.dst.axes)}, {self.expr(st.value)}, "
                    f"dtype={self.buffer_dtype(st.dst)}, device=_dev)"]
        if isinstance(st, kir.Loop):
            self.axes = ()
            lines = []
            for sub in kir.statements(st.body):     # slices written in the loop: allocated once, before it
                if isinstance(sub, kir.Compute) and sub.at and sub.dst.name not in self.defined:
                    lines.append(self.allocate(sub.dst, ind))
            lines.append(f"{ind}for {st.var} in range({self.expr(st.extent)}):")
            for sub in st.body:
                lines += self.statement(sub, ind + "    ")
            return lines
        raise TypeError(st)

    def gemm(self, st: kir.Gemm, ind) -> List[str]:
        """c (+)= the ordered products' sum (`_matmul`), each operand laid out as [c's axis, k]."""
        def operand(axis):
            b = st.a if axis in st.a.axes else st.b
            return b.name if b.axes == (axis, st.k) else f"{b.name}.T"
        value = f"_matmul({operand(st.c.axes[0])}, {operand(st.c.axes[1])})"
        if st.accumulate:
            value = f"{st.c.name} + {value}"
        self.defined.add(st.c.name)
        return [f"{ind}{st.c.name} = {value}"]

    def updated_in_place(self) -> set:
        """Buffers that a Compute writes one slice of (`at`)."""
        return {st.dst.name for k in self.m.kernels for st in kir.statements(k.body)
                if isinstance(st, kir.Compute) and st.at}

    def store(self, st: kir.Store, ind) -> List[str]:
        self.axes = st.axes
        value = self.expr(st.value)
        guard = self.expr(st.guard) if st.guard is not None else "None"
        dst = self.storage_name(st.tensor)
        if st.view is not None:
            line = (f"_store_view({dst}, {self.view_args(st.tensor, st.view)}, {value}, {guard}, "
                    f"{st.accumulate})")
        else:
            idx = _tuple(self.expr(i) for i in st.indices)
            flat = ".reshape(-1)" if self.tensors[st.tensor].flat else ""
            line = f"_scatter({dst}{flat}, {idx}, {value}, {guard}, {st.accumulate})"
        lines = [ind + line]
        if st.tensor in self.given and isinstance(st.value, ir.Encode) and isinstance(st.value.arg, ir.Read):
            # the kernel's value of this output replaces the reference's, so that what follows is
            # compared bit for bit (exact: {given: [...]})
            b = self.bufs[st.value.arg.buffer]
            src = self.fetch(ir.Fetch("_g", st.indices, view=st.view), self.expr, guarded=False)
            lines.append(f"{ind}if _given and {st.tensor!r} in _given:")
            lines.append(f"{ind}    _g = _given[{st.tensor!r}]")
            lines.append(f"{ind}    {b.name} = _fit({src}.to(torch.float32), {self.shape(b.axes)})")
        return lines

    def view_args(self, tensor, view) -> str:
        sizes, flat, have = [], [], []
        for group in view:
            sizes.append(" * ".join(ir.extent_name(g) for g in group))
            flat += [ir.extent_name(g) for g in group]
            have += list(group)
        return f"{_tuple(sizes)}, {_tuple(flat)}, {_tuple(repr(a) for a in have)}, {_tuple(repr(a) for a in self.axes)}"

    @staticmethod
    def storage_name(tensor) -> str:
        return f"_s_{tensor}"

    # -- the function -----------------------------------------------------------------------------------
    def binds(self) -> List[str]:
        """Sizes bound from the inputs' shapes (required inputs first: an optional one may be None)."""
        lines, bound = [], set()
        spec = self.spec
        for tname, sig in sorted(((n, s) for n, s in self.sigs.items() if s.role == "input"),
                                 key=lambda kv: kv[1].optional):
            if not sig.present:
                continue
            codes, elems = sig.packet()
            for i, s in enumerate(sig.shape):
                b = binding(s, spec.dims)
                if not b or b[0] in bound:
                    continue
                last = i == len(sig.shape) - 1 and (codes, elems) != (1, 1)
                if last and sig.scale is not None:
                    continue                  # packed scales may end in a partial word
                size = f"{tname}.shape[{i}] * {codes} // {elems}" if last else f"{tname}.shape[{i}]"
                lines.append(f"{P.sym(b[0])} = ({size}) // {b[1]}" if b[1] > 1 else f"{P.sym(b[0])} = {size}")
                bound.add(b[0])
        for tname, sig in self.sigs.items():
            if sig.at and sig.present and sig.role == "input":
                lines.append(f"n_{tname} = {tname}.numel()" if sig.flat else f"n_{tname} = {tname}.shape[0]")
        for a, ax in self.m.axes.items():
            lines.append(f"{ir.extent_name(a)} = {P.py_expr(ax.extent, tl=False)}")
        lines += [f"{n} = {P.py_expr(e, tl=False)}" for n, e in self.m.sizes]
        return lines

    def device_of(self) -> str:
        return next(n for n, s in self.sigs.items() if s.role == "input" and not s.optional)

    def outputs(self) -> tuple:
        """(allocation lines, returned sources) of every output."""
        alloc, rets = [], []
        for name, sig in self.sigs.items():
            if sig.role != "output":
                continue
            if not sig.present:
                dt = f"{sig.like}.dtype" if sig.like else f"torch.{sig.container}"
                rets.append(f"torch.empty(0, dtype={dt}, device=_dev)")
                continue
            t = self.tensors[name]
            shape = _tuple(P.py_expr(s, tl=False) for s in t.shape)
            if sig.at:
                dims = sig.shape if sig.flat else sig.shape[:1]        # elements, or rows
                alloc.append(f"n_{name} = {' * '.join(P.py_expr(s, tl=False) for s in dims)}")
                shape = _tuple(P.py_expr(s, tl=False) for s in sig.shape)
            if sig.at and sig.into:       # stored at positions over a copy of the input it is written into
                alloc.append(f"{self.storage_name(name)} = {sig.into}.clone()")
            else:
                start = "torch.zeros(" if sig.fill is None else f"torch.full(fill_value={sig.fill}, size="
                alloc.append(f"{self.storage_name(name)} = {start}{shape}, dtype={self.torch_dtype(t.elem)}, "
                             "device=_dev)")
            src = self.storage_name(name)
            if sig.col_pad:
                src = f"{src}[:, :{P.py_expr(sig.shape[0], tl=False)}].T"
            elif sig.container and sig.packing is not None and sig.fmt is not None and \
                    sig.container != sig.packing.word:
                src = f"{src}.view(torch.{sig.container})"
            rets.append(src)
        return alloc, rets

    def function(self, name: str, choices=(), rows_only=False) -> List[str]:
        statics = [P.sym(p.name) for p in self.spec.value_params]
        args = list(self.sigs[n].name for n in self.sigs if self.sigs[n].role == "input") + statics
        kw = (", *, " + ", ".join(choices)) if choices else ""
        head = [f"def {name}({', '.join(args)}{kw}, _given=None):"]
        ind = " " * 8
        body = []
        stmts = self.m.kernels[0].body
        if rows_only:
            stmts = _slice_for(stmts, self.m.keep)
        for st in stmts:
            body += self.statement(st, ind)
        alloc, rets = self.outputs()
        if rows_only:
            alloc, rets = [], [self.m.keep]
        pre = ["    " + line for line in self.binds()]
        pre += ["    # factories name the device too: torch.compile does not carry the context into them",
                f"    _dev = {self.device_of()}.device", "    with torch.device(_dev):"]
        pre += [ind + a for a in alloc]
        ret = ", ".join(rets) + ("," if len(rets) == 1 and not rows_only else "")
        return head + pre + body + [f"{ind}return {ret}"]


def _bcast(value_axes, target_axes) -> str:
    """Indexing that lifts a tensor over `value_axes` to broadcast against `target_axes`."""
    if tuple(value_axes) == tuple(target_axes) or not target_axes:
        return ""
    if not value_axes:
        return ""
    order = [a for a in target_axes if a in value_axes]
    perm = "" if order == list(value_axes) else f".permute{_tuple(str(value_axes.index(a)) for a in order)}"
    return perm + "[" + ", ".join(":" if a in value_axes else "None" for a in target_axes) + "]"


def _slice_for(stmts, keep: Optional[str]):
    """The statements the kept-rows buffer depends on, in order."""
    need, out = {keep}, []
    for st in reversed(list(stmts)):
        if isinstance(st, kir.Compute) and st.dst.name in need:
            need |= {n.buffer for n in ir.walk(st.value) if isinstance(n, ir.Read)}
            out.append(st)
    return out[::-1]


def print_reference(catalog, spec, module: kir.Module, name: str, choices=(), rows_only=False):
    p = ReferencePrinter(catalog, spec, module)
    return p.function(name, choices, rows_only), p.helpers

