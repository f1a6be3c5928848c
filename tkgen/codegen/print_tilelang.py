"""Print a scheduled kernel-IR module as a TileLang kernel factory, for one architecture profile.

The profile decides the few things that differ between targets: where tiles live (fragments or thread-local
arrays), which loops index them (T.Parallel or T.grid), the storage type of each element format (native, or
integer codes through the generated codecs), and whether native casts saturate. Everything else prints the
same for every target: the CUDA and the C forms come out of this one printer.
"""
from __future__ import annotations

from typing import Dict, List

from ..spec import expr as E
from ..ir import prim as ir, kernel as kir
from ..ir.sharing import Bindings
from ..spec import pyexpr as P
from ..ir.prim import F32, I32, I64, RAW, U32
from .printers import TileLangPrinter, tl_dtype
from ..spec.safety import int_problem
from ..spec.signature import INT_ELEMS, INT_STORAGE, is_native, storage

_WIDTH = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "int64": 64}
_SCALE_FLOAT = "float32"


class _Kernel:
    """Loop and block variables of the kernel being printed."""

    def __init__(self, kernel: kir.Kernel, axes: Dict[str, kir.Axis]):
        self.kernel, self.axes = kernel, axes

    def index(self, axis, local) -> str:
        if not local:      # index_tiles writes every global index out (tkgen/schedule/tile_indices.py)
            raise ValueError(f"the global index of axis {axis!r} is not written out: the pipeline must run the "
                             "pass index_tiles")
        return ir.lane_var(axis)


class KernelPrinter:
    """One module (a variant, or variants merged into one factory) as a factory's source lines."""

    def __init__(self, catalog, arch, module: kir.Module):
        self.catalog, self.arch, self.m = catalog, arch, module
        self.tensors = {t.name: t for t in module.tensors}
        self.helpers = set(module.helpers)
        self.uses_f32_bits = False
        self.dispatch: Dict[str, dict] = {}          # LOAD_x / STORE_x tables used
        self.P = "T.Parallel" if arch.loops == "parallel" else "T.grid"
        self.k = None
        self.expr = TileLangPrinter(self)

    # -- storage and codecs -----------------------------------------------------------------------------
    def storage_src(self, elem: str) -> str:
        if elem.startswith("@"):
            self.dispatch.setdefault("STORAGE_" + elem[1:], {})
            return "STORAGE_" + elem[1:]
        return repr(storage(self.catalog, self.arch, elem))

    def dtypes_of(self, elem):
        return self.m.dtypes[elem[1:]]

    def decode(self, elem: str, raw: str, dtype: str) -> str:
        """Source of the value of a stored element (or of a packed code)."""
        if elem.startswith("@"):
            name = "LOAD_" + elem[1:]
            self.dispatch[name] = {dt: self.loader(dt) for dt in self.dtypes_of(elem)}
            return f"{name}({raw})"
        if dtype == U32:                       # the zero-extended bits of an integer word (or byte)
            mask = (1 << _WIDTH[elem]) - 1 if elem in _WIDTH else 0xFFFFFFFF
            return f'(T.cast({raw}, "uint32") & T.uint32({mask:#x}))'
        if elem in INT_ELEMS or elem in INT_STORAGE:
            return f'T.cast({raw}, "{tl_dtype(dtype)}")'
        if elem == _SCALE_FLOAT:
            return raw
        if self._decodes_a_code(elem):          # `raw` is the u32 code
            self.helpers.add(f"decode_{elem}")
            return f"decode_{elem}({raw})"
        return self._decode_format(elem, raw)

    def _decodes_a_code(self, elem: str) -> bool:
        """Whether a stored element of `elem` is decoded from its u32 code (a packed format's helper)."""
        return elem in self.catalog.elements and bool(self.catalog.elements[elem].pack)

    def _decode_format(self, elem, raw):
        fmt = self.catalog.elements[elem]
        if is_native(self.catalog, self.arch, elem):
            return raw if fmt.is_float32 else f'T.cast({raw}, "float32")'
        self.helpers.add(f"decode_{elem}")
        return f'decode_{elem}(T.cast({raw}, "uint32"))'

    def repeats(self, e) -> int:
        """How often the printed node repeats each child: a packed code's decoder is a Python function of
        the code, which it reads in each of its branches (tkgen/ir/sharing.py binds the code once)."""
        if isinstance(e, ir.Decode) and e.dtype != U32 and self._decodes_a_code(e.elem):
            return 2
        return 1

    def loader(self, dt: str) -> str:
        """`lambda v: ...` decoding a stored element of dtype `dt` (a factory-level dispatch entry)."""
        if dt in INT_ELEMS:
            return 'lambda v: T.cast(v, "int32")'
        return f"lambda v: {self._decode_format(dt, 'v')}"

    def encode(self, elem: str, value: str, dtype: str) -> str:
        """Source of the stored element (or packed code) of a value."""
        if elem.startswith("@"):
            name = "STORE_" + elem[1:]
            self.dispatch[name] = {dt: self.storer(dt) for dt in self.dtypes_of(elem)}
            return f"{name}({value})"
        if elem in INT_ELEMS or elem in INT_STORAGE:
            if elem == "int32" and dtype == U32:
                return f'T.reinterpret({value}, "int32")'
            return f'T.cast({value}, "{elem}")'
        if elem == _SCALE_FLOAT:
            return value
        fmt = self.catalog.elements[elem]
        if fmt.pack:
            self.helpers.add(f"encode_{elem}")
            return f"encode_{elem}({value})"
        return self._encode_format(elem, value)

    def _encode_format(self, elem, value):
        fmt = self.catalog.elements[elem]
        if is_native(self.catalog, self.arch, elem):
            if fmt.is_float32:
                return value
            if fmt.overflow == "saturate" and not self.arch.native_casts_saturate:
                # clamp first where the conversion itself may not saturate. A NaN passes around the clamp
                # (fmaxf would make it -max) to become the format's NaN code. (Where the conversion does
                # saturate, the bare cast is what TileLang vectorizes: on CUDA a clamp, and more so the
                # NaN test, turned 16-byte e4m3 stores into byte stores.)
                m = repr(fmt.max_value)
                clamped = f"T.clamp({value}, T.float32(-{m}), T.float32({m}))"
                value = clamped if fmt.specials == "finite" else \
                    f"T.if_then_else(T.isnan({value}), {value}, {clamped})"
            return f'T.cast({value}, "{fmt.native_on(self.arch.backend)}")'
        self.helpers.add(f"encode_{elem}")
        return f'T.cast(encode_{elem}({value}), "{fmt.storage}")'

    def storer(self, dt: str) -> str:
        return f"lambda v: {self._encode_format(dt, 'v')}"

    # -- memory nodes (TileLangPrinter's context) -------------------------------------------------------
    def node(self, e, pr) -> str:
        if isinstance(e, ir.Index):
            return self.k.index(e.axis, e.local)
        if isinstance(e, ir.Size):
            return e.name
        if isinstance(e, ir.Scalar):
            if any(e.name == n for n, _ in self.m.scalar_args):     # a kernel argument, an int32
                return e.name if e.dtype == ir.I32 else f'T.cast({e.name}, "{tl_dtype(e.dtype)}")'
            if e.dtype == F32 and self.arch.backend == "cpu":
                # the float32 bits of a float param: TVM folds a cast of `T.float32(x)` from x itself (so an
                # fma's float64 product took 0.95, not float32(0.95)), and C prints 7 digits
                self.uses_f32_bits = True
                return f'T.reinterpret(T.uint32(f32_bits({e.name})), "float32")'
            return f"T.{tl_dtype(e.dtype)}({e.name})"
        if isinstance(e, ir.Read):
            b = self.buffers[e.buffer]
            idx = [pr(i) for i in e.indices] if e.indices is not None else [ir.lane_var(a) for a in b.axes]
            src = f"{b.name}[{', '.join(idx) or '0'}]"
            return src if e.guard is None else f"T.if_then_else({pr(e.guard)}, {src}, {self.zero(e.dtype)})"
        if isinstance(e, ir.Fetch):
            src = f"{e.tensor}[{', '.join(pr(i) for i in e.indices)}]"
            if e.guard is None:
                return src
            zero = f"T.cast(0, {self.storage_src(self.tensors[e.tensor].elem)})"
            return f"T.if_then_else({pr(e.guard)}, {src}, {zero})"
        if isinstance(e, ir.Decode):
            arg = e.arg
            if isinstance(arg, ir.Fetch) and arg.guard is not None:
                # guard the decoded value, so that the decoder never sees the zero of another type
                inner = self.decode(e.elem, pr(ir.Fetch(arg.tensor, arg.indices)), e.dtype)
                return f"T.if_then_else({pr(arg.guard)}, {inner}, {self.zero(e.dtype)})"
            return self.decode(e.elem, pr(arg), e.dtype)
        if isinstance(e, ir.Encode):
            return self.encode(e.elem, pr(e.arg), e.arg.dtype)
        raise TypeError(e)

    @staticmethod
    def zero(dtype) -> str:
        return {F32: "T.float32(0.0)", I32: "T.int32(0)", U32: "T.uint32(0)", I64: "T.int64(0)"}[dtype]

    # -- statements -------------------------------------------------------------------------------------
    def loop_header(self, axes, vector=0) -> str:
        blocks = [ir.block_name(a) for a in axes]
        if vector:
            # only for a tile within its budget: a larger one spills, and laying its load out for the store
            # made that worse (a dequantization with 128 x 128 scale blocks: 105 -> 128 µs on the H200)
            # (`vector`: the stored element's bytes; the width and the budget are knobs of the profile)
            blocks.append(f"coalesced_width=(T.int32(vector_bytes // {int(vector)}) if {' * '.join(blocks)} <= "
                          f"tile_elems else None)")
        return f"for {', '.join(ir.lane_var(a) for a in axes)} in {self.P}({', '.join(blocks)}):"

    def target(self, st: kir.Compute) -> str:
        at = dict(st.at)
        if at and st.dst.scope == "tile" and self.arch.tile_memory == "fragment":
            # TileLang 0.1.15 takes the writing threads of such a slice from the fragment's layout and
            # guards them with `thread < owner + 1`: every thread up to the owner writes (wrong results)
            raise ValueError(f"{st.dst.name}: a fragment written one slice at a time; collect it in shared memory")
        return f"{st.dst.name}[{', '.join(self.expr(at[a]) if a in at else ir.lane_var(a) for a in st.dst.axes) or '0'}]"

    def store_line(self, st: kir.Store) -> str:
        dst = f"{st.tensor}[{', '.join(self.expr(i) for i in st.indices)}]"
        value = self.expr(st.value)
        return f"T.atomic_add({dst}, {value})" if st.accumulate else f"{dst} = {value}"

    def elementwise(self, axes, body, ind, vector=0) -> List[str]:
        """One loop over `axes` running Computes and Stores in order; consecutive stores under one guard."""
        lines = [ind + self.loop_header(axes, vector)] if axes else []
        inner = ind + "    " if axes else ind
        i = 0
        while i < len(body):
            st = body[i]
            if isinstance(st, kir.Compute):
                lines += self.bound((st.value,), tuple(e for _, e in st.at), inner,
                                    lambda: [f"{inner}{self.target(st)} = {self.expr(st.value)}"])
                i += 1
                continue
            group = [st]
            while i + len(group) < len(body) and isinstance(body[i + len(group)], kir.Store) and \
                    body[i + len(group)].guard == st.guard:
                group.append(body[i + len(group)])
            values, at = tuple(s.value for s in group), tuple(e for s in group for e in s.indices)
            if st.guard is None:
                lines += self.bound(values, at, inner, lambda: [inner + self.store_line(s) for s in group])
            else:
                lines.append(f"{inner}if {self.expr(st.guard)}:")
                lines += self.bound(values, at, inner + "    ",
                                    lambda: [inner + "    " + self.store_line(s) for s in group])
            i += len(group)
        return lines

    def bound(self, values, indices, ind, print_statement) -> List[str]:
        """The statement's lines after a let for each subtree its values would print more than once
        (tkgen/ir/sharing.py), the statement printing those by name."""
        self.expr.bindings = b = Bindings(values, indices, repeats=self.repeats)
        lines = []
        try:
            for k, e in enumerate(b.subtrees):
                # named per statement (a later one shadows the name), so that equal statements of merged
                # variants print alike
                lines.append(f"{ind}_v{k} = {self.expr(e, named=False)}")
                b.name(k, f"_v{k}")
            return lines + print_statement()
        finally:
            self.expr.bindings = None

    def statement(self, st, ind) -> List[str]:
        if isinstance(st, kir.Nest):
            return self.elementwise(st.axes, st.body, ind, st.vector)
        if isinstance(st, kir.Compute):
            return self.elementwise(st.axes, (st,), ind)
        if isinstance(st, kir.Store):
            return self.elementwise(st.axes, (st,), ind)
        if isinstance(st, kir.Reduce):
            clear = "" if not st.accumulate else ", clear=False"
            return [f"{ind}T.reduce_{st.kind}({st.src.name}, {st.dst.name}, dim={st.src.axes.index(st.axis)}{clear})"]
        if isinstance(st, kir.Fill):
            return [f"{ind}T.fill({st.dst.name}, {self.expr(st.value)})"]
        if isinstance(st, kir.Gemm):
            m, n = st.c.axes
            a, b = (st.a, st.b) if m in st.a.axes else (st.b, st.a)
            return [f"{ind}T.gemm({a.name}, {b.name}, {st.c.name}, transpose_A={a.axes != (m, st.k)}, "
                    f"transpose_B={b.axes == (n, st.k)}, clear_accum={not st.accumulate})"]
        if isinstance(st, kir.Copy):
            return self.copy(st, ind)
        if isinstance(st, kir.Loop):
            ext = self.expr(st.extent)
            if st.kind == "unroll" and st.limit:
                head = f"(T.unroll if {ext} <= {st.limit} else T.serial)({ext})"
            elif st.kind == "pipelined" and self.arch.backend == "cuda":
                head = f"T.Pipelined({ext}, num_stages={st.stages})"
            elif st.kind == "pipelined":     # TileLang's C target has no pipeline: the same statements in order
                head = f"T.serial({ext})"
            elif st.kind == "static":
                head = f"T.unroll({ext}, explicit=True)"
            else:
                head = f"T.{st.kind}({ext})"
            lines = [f"{ind}for {st.var} in {head}:"]
            lines += [f"{ind}    {name} = {self.expr(e)}" for name, e in st.binds]
            for sub in st.body:
                lines += self.statement(sub, ind + "    ")
            return lines
        raise TypeError(st)

    def copy(self, st: kir.Copy, ind) -> List[str]:
        """`T.copy` of the box (a slice per dim the box runs over, an index per other dim) into or out of the
        buffer; a looped axis is a serial loop around it, the buffer indexed at it; the instruction asked for,
        if any, as the copy's `prefer_instruction` (a target without it ignores it). TileLang predicates
        each dim of the tensor's region against its shape: past the end a load reads zeros and a store
        writes nothing."""
        dims = []
        for e, a in st.box:
            start = self.expr(e)
            end = ir.block_name(a) if e == ir.Const(0, ir.I32) else f"{start} + {ir.block_name(a)}"
            dims.append(start if a is None else f"{'0' if e == ir.Const(0, ir.I32) else start}:{end}")
        region = f"{st.tensor}[{', '.join(dims)}]"
        buf = st.buf.name
        if st.looped or st.buf.pad:
            buf += f"[{', '.join(ir.lane_var(a) if a in st.looped else f'0:{ir.block_name(a)}' for a in st.buf.axes)}]"
        lines = []
        for a in st.looped:
            lines.append(f"{ind}for {ir.lane_var(a)} in T.serial({ir.block_name(a)}):")
            ind += "    "
        hint = f", annotations={{'prefer_instruction': {st.instruction!r}}}" if st.instruction else ""
        src, dst = (buf, region) if st.store else (region, buf)
        return lines + [f"{ind}T.copy({src}, {dst}{hint})"]

    # -- the factory ------------------------------------------------------------------------------------
    def alloc(self, b: kir.Buffer) -> str:
        shape = [ir.block_name(a) for a in b.axes] or ["1"]
        dtype = self.storage_src(b.elem) if b.dtype == RAW else repr(tl_dtype(b.dtype))
        if b.pad:
            shape[-1] += f" + bank_pad({dtype})"
        fn = {"tile": "T.alloc_fragment" if self.arch.tile_memory == "fragment" else "T.alloc_local",
              "shared": "T.alloc_shared" if self.arch.tile_memory == "fragment" else "T.alloc_local",
              "var": "T.alloc_var"}[b.scope]
        shape_src = "(" + ", ".join(shape) + ("," if len(shape) == 1 else "") + ")"
        return f"{b.name} = {fn}({shape_src}, {dtype})"

    def grid(self, kernel):
        split = list(kernel.grid)
        exts = [f"T.ceildiv({ir.extent_name(a)}, {ir.block_name(a)})" for a in split]
        if kernel.persistent:
            return ["blocks"], ["bid"], []
        if not exts:
            return ["1"], ["_b"], []
        if len(exts) < 2:
            return exts, [ir.tile_var(split[0])], []
        ids = []
        for i, a in enumerate(split):
            inner = " * ".join(exts[i + 1:])
            idx = f"pid // ({inner})" if inner else "pid"
            ids.append(f"{ir.tile_var(a)} = {idx} % {exts[i]}" if i else f"{ir.tile_var(a)} = {idx}")
        return [" * ".join(exts)], ["pid"], ids

    def kernel_lines(self, kernel: kir.Kernel, ind) -> List[str]:
        self.k = _Kernel(kernel, self.m.axes)
        self.buffers = kir.buffers(kernel.body)
        exts, ids, block_ids = self.grid(kernel)
        threads = self.expr(kernel.threads) if kernel.threads is not None else "threads"
        lines = [f"{ind}with T.Kernel({', '.join(exts)}, threads={threads}) as ({', '.join(ids)},):"]
        inner = ind + "    "
        lines += [inner + b for b in block_ids]
        lines += [inner + a for a in self.stride_assumptions()]
        lines += [inner + self.alloc(b) for b in self.buffers.values()]
        for st in kernel.body:
            lines += self.statement(st, inner)
        return lines

    def stride_granules(self) -> Dict[str, str]:
        """For each strided input whose last dim is static (the name of its first stride -> Python source
        for the factory), the granule its strides are multiples of (tkgen/runtime/schedule.py:
        vector_granule, which the runtime checks views against)."""
        static = set(self.m.dims)
        out = {}
        for t in self.m.tensors:
            if t.strides is None or not {P.sym(n) for n in E.names(t.shape[-1])} <= static:
                continue
            out.setdefault(P.py_expr(t.strides[0]),
                           f"vector_granule({self.storage_src(t.elem)}, {P.py_expr(t.shape[-1])})")
        return out

    def stride_assumptions(self) -> List[str]:
        """`T.assume` that each runtime stride is a multiple of its granule: TileLang then keeps 16-byte
        vector loads through strides it cannot see (the views of a packed kv load as a contiguous tensor)."""
        granules = self.stride_granules()
        lines = []
        for t in self.m.tensors:
            first = P.py_expr(t.strides[0]) if t.strides is not None else None
            for s in t.strides[:-1] if first in granules else ():
                line = f"T.assume({P.py_expr(s)} % {granule_name(first)} == 0)"
                lines += [line] if line not in lines else []
        return lines

    def factory(self, name: str, choices=()) -> List[str]:
        """The lines of `def <name>(...)`: sizes, checks and dispatch tables, then the prim_func."""
        m = self.m
        body = []
        for k in m.kernels:
            body += self.kernel_lines(k, " " * 8)
        args = list(m.dims) + [f"{n}_dtype" for n in m.dtype_args] + list(choices)
        for n, v in m.knobs:                  # typed before they reach code: integers within bounds
            problem = int_problem(v)
            if problem:
                raise ValueError(f"{m.op}: schedule knob {n}: {problem}")
        # no defaults: the values are the profile's, in its knob table (knobs_<arch>.py), so that profiles
        # whose kernels differ only in knob values share this module
        knobs = ", ".join(n for n, _ in m.knobs)
        head = [f"def {name}({', '.join(args)}{', *, ' + knobs if knobs else ''}):"]
        pre = [f'{d} = T.dynamic("{d.rstrip("_")}")' if not d.startswith("n_") else f'{d} = T.dynamic("{d}")'
               for d in m.dynamic]
        pre += [f"{ir.extent_name(a)} = {P.py_expr(ax.extent)}" for a, ax in m.axes.items()]
        for k in m.kernels:
            pre += [f"{ir.block_name(a)} = {P.py_expr(t.block)}" for a, t in k.tiles if t.block is not None]
        if self.budget_sizes_tiles() and self.arch.loops == "parallel":
            # a tile the budget could not bound (a whole row wider than it) gets more threads, not spills
            sizes = sorted({" * ".join(ir.block_name(a) for a in b.axes) for b in kir.buffers(m.kernels[0].body).values()
                            if b.scope == "tile" and b.axes})
            if sizes:
                tile = sizes[0] if len(sizes) == 1 else f"max({', '.join(sizes)})"
                pre.append(f"threads = fit_threads(threads, {tile}, tile_elems)")
        for cond, msg in m.checks:
            pre += [f"if not ({P.py_expr(cond)}):", f"    raise ValueError({msg!r})"]
        pre += [f"{n} = {P.py_expr(e, tl=False)}" for n, e in m.sizes]
        for n in m.dtype_args:
            table = {dt: storage(self.catalog, self.arch, dt) for dt in m.dtypes[n]}
            pre.append(f"STORAGE_{n} = {table!r}[{n}_dtype]")
        for tname, table in sorted(self.dispatch.items()):
            if tname.startswith("STORAGE_"):
                continue
            owner = tname.split("_", 1)[1]
            if len(table) == 1:
                pre.append(f"{tname} = {next(iter(table.values()))}")
            else:
                entries = ", ".join(f"{dt!r}: {fn}" for dt, fn in table.items())
                pre.append(f"{tname} = {{{entries}}}[{owner}_dtype]")
        pre += [f"{granule_name(s)} = {g}" for s, g in self.stride_granules().items()]
        params = [f"        {t.name}: T.Tensor({self.shape(t)}, {self.storage_src(t.elem)})," if t.strides is None else
                  f"        {t.name}: T.StridedTensor({self.shape(t)}, {self.tuple_src(t.strides)}, "
                  f"{self.storage_src(t.elem)})," for t in m.tensors]
        params += [f"        {n}: T.{tl_dtype(dt)}," for n, dt in m.scalar_args]
        return head + ["    " + line for line in pre] + ["", "    @T.prim_func", "    def kernel(", *params, "    ):"] + \
            body + ["", "    return kernel"]

    def budget_sizes_tiles(self) -> bool:
        """Whether the tile budget `tile_elems` sizes some block (an `auto` axis), not only a vector layout."""
        return any("tile_elems" in E.names(t.block) for k in self.m.kernels for _, t in k.tiles
                   if t.block is not None)

    @staticmethod
    def shape(t: kir.TensorArg) -> str:
        return KernelPrinter.tuple_src(t.shape)

    @staticmethod
    def tuple_src(sizes) -> str:
        dims = [P.py_expr(s) for s in sizes]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def granule_name(first_stride: str) -> str:
    """The factory's name for the granule of the strides S_<tensor>_0, S_<tensor>_1, ...: S_<tensor>_g."""
    return first_stride.rsplit("_", 1)[0] + "_g"


def print_factory(catalog, arch, module: kir.Module, name: str, choices=()):
    """(lines of the factory, helper names it calls)."""
    p = KernelPrinter(catalog, arch, module)
    lines = p.factory(name, choices)
    return lines, p.helpers | ({"f32_bits"} if p.uses_f32_bits else set())
