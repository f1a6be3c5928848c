"""One checked fast path per specialization: what an eager call of a generated op costs on the host.

`runtime.ops.check` interprets an op's `OpInfo` afresh on every call (tens of µs). Most of what it decides
depends only on the call's *shape class*: the params, and per input its presence, dtype, device, rank and
the sizes of the dims that are compiled into the kernel. The sizes of the other dims (the rows, and the
sizes of tensors addressed at positions) change from call to call. A `Specialization` is built by the full
check of the first call of a class and keeps what the next calls of the class need: where each runtime
dim is read, the few rules that involve one, how each output is allocated and the kernel's launch.

A call that the fast path cannot vouch for (a new class, a non-contiguous tensor, a rule broken) goes
through the full check, which raises the same errors as always; so the fast path never raises one itself.
"""
from __future__ import annotations

import re
from functools import partial
from typing import Dict, Optional

import torch

from . import ops as R
from .compile import scratch_of
from .launch import launcher
from .layouts import col_major_empty, col_major_storage

_NAME = re.compile(r"[A-Za-z_]\w*")


def eager(*tensors) -> bool:
    """Whether a call may run its implementation directly instead of through the `torch.library`
    dispatcher: no tracer, mode or transform is watching (torch.compile, fake tensors, vmap, jit), every
    tensor is a plain tensor and no gradient is needed. Anything else (and arguments that are not tensors,
    so that the full check names them) takes the dispatcher."""
    if (torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled()
            or torch._C._functorch.peek_interpreter_stack() is not None or torch._C._get_tracing_state()):
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
            return False
        if grad and t.requires_grad:
            return False
    return True


class CallSite:
    """Per op: how a call's shape class is keyed, and the specializations built so far."""

    def __init__(self, op):
        self.op = op
        self.runtime_dims = {d[0] for d in op.dims} - set(op.factory_args)
        # per input, the dims whose size is part of the key: those whose shape text names no runtime dim
        self.keys = tuple(_key_positions([bool(set(_NAME.findall(s)) & self.runtime_dims) for s in i.shape])
                          for i in op.inputs)
        self.specializations: Dict[tuple, Specialization] = {}
        self.strided = tuple(i.strided for i in op.inputs)      # whose kernels take their strides
        # choices naming a runtime dim: given by name, their value changes with the call's sizes, which the
        # key leaves out, so such a call takes the full check
        self.runtime_symbols = frozenset(c for p in op.params if not p.structural for c in p.choices or ()
                                         if isinstance(c, str) and c in self.runtime_dims)

    def key(self, tensors, params):
        """The shape class of a call, or None when the fast path cannot vouch for its tensors."""
        parts = [params, *map(type, params)]        # True == 1 and 128.0 == 128, but params are typed
        if self.runtime_symbols and any(type(v) is str and v in self.runtime_symbols for v in params):
            return None
        try:
            for t, keep, strided in zip(tensors, self.keys, self.strided):
                if t is None:
                    parts.append(None)
                elif not (t.is_contiguous() or (strided and R.strided_as_is(t))):
                    return None
                else:
                    s = t.shape
                    parts += (t.dtype, t.device, len(s), s[keep] if type(keep) is slice else tuple(s[i] for i in keep))
        except (AttributeError, IndexError, TypeError):       # not a tensor, a short rank
            return None
        return tuple(parts)

    def lookup(self, tensors, params):
        """(key, the specialization of its class or None)."""
        key = self.key(tensors, params)
        try:
            return key, self.specializations.get((key, None, ())) if key is not None else None
        except TypeError:                                     # an unhashable param: the full check names it
            return None, None

    def specialization(self, tensors: dict, params: dict, dims: dict, key, arch=None, schedule=None):
        """The specialization serving a call that the full check passed (built on the first call of
        its class; `arch` and `schedule` select others, for tools)."""
        full = (key, arch, tuple(sorted((schedule or {}).items())))
        spec = self.specializations.get(full) if key is not None else None
        if spec is None:
            spec = Specialization(self.op, self, tensors, params, dims, arch, schedule)
            if key is not None:
                self.specializations[full] = spec
        return spec

    def checked(self, tensors: tuple, params: tuple):
        """(specialization, dims) of a call: the fast path where it serves, else the full check (which
        raises on a bad argument) and the specialization of its class."""
        key, spec = self.lookup(tensors, params)
        d = spec.bind(tensors) if spec is not None else None
        if d is not None:
            return spec, d
        named = dict(zip((i.name for i in self.op.inputs), tensors)), dict(zip((p.name for p in self.op.params), params))
        d = R.check(self.op, *named)
        return self.specialization(*named, d, key), d



def site_of(op) -> "CallSite":
    """The op's fast path: its shape classes and their specializations, kept on the op."""
    site = op.__dict__.get("_site")
    if site is None:
        site = op.__dict__["_site"] = CallSite(op)
    return site

def in_place(op):
    """(output index, input index) of each output written into an input's storage (`into:`)."""
    got = op.__dict__.get("_in_place")
    if got is None:
        names = [i.name for i in op.inputs]
        got = op.__dict__["_in_place"] = tuple((k, names.index(o.into)) for k, o in enumerate(op.outputs) if o.into)
    return got


def _into_inputs(op, tensors, outs):
    """The outputs with those written in place replaced by their inputs (given in `op.inputs` order)."""
    for k, j in in_place(op):
        outs = outs[:k] + (tensors[j],) + outs[k + 1:]
    return outs


def call(op, tensors: tuple, params: tuple):
    """Check, allocate and launch a call given in `op.inputs` and `op.params` order; the outputs (those
    written in place are their inputs, mutated)."""
    spec, d = site_of(op).checked(tensors, params)
    outs = spec.allocate(d)
    if in_place(op):
        outs = _into_inputs(op, tensors, outs)
    if spec.rows is None or d[spec.rows] != 0:
        spec.run(tensors, outs)
    return outs


def _key_positions(runtime):
    """Positions kept in the key, as a slice where they are a suffix (the common case: rows first)."""
    keep = [i for i, r in enumerate(runtime) if not r]
    if keep == list(range(len(runtime) - len(keep), len(runtime))):
        return slice(len(runtime) - len(keep), None)
    return tuple(keep)


class NotFast(Exception):
    """A shape class that only the full check serves (a runtime dim read from a packed last dim)."""


class Specialization:
    """What a call of one shape class needs once its key matched: the runtime dims read from the inputs
    and checked, the outputs allocated, the kernel launched.

    Built from a call that the full check passed (`dims` is its result); `arch` and `schedule` override
    the device's profile and the profile's schedule (tools, tuning)."""

    def __init__(self, op, site: CallSite, tensors: dict, params: dict, dims: dict, arch=None, schedule=None):
        self.op = op
        self.dims = dict(dims)
        variant = R.variant_of(op, params, tensors)
        present = [j for j, i in enumerate(op.inputs) if tensors[i.name] is not None]
        self.device = tensors[op.inputs[present[0]].name].device
        self.cuda_index = self.device.index if self.device.type == "cuda" else None
        try:
            self.sources, self.shapes = self._runtime_reads(op, site, tensors, variant)
            self.fast = True
        except NotFast:
            self.sources, self.shapes, self.fast = (), (), False
        read = {s[0] for s in self.sources}
        self.bounds = tuple((n, lo, hi) for n, _, lo, hi in op.dims if n in read)
        self.requires = tuple(rule for text, rule in op.requires if set(_NAME.findall(text)) & site.runtime_dims)
        self.params = tuple(p for p in op.params if not p.structural and p.kind != "float" and
                            (p.range is not None or any(c in site.runtime_dims for c in p.choices or ())))
        dts = R.input_dtypes(op, tensors)
        self.outputs = tuple(Output(o, variant, R.TORCH_DTYPES[o.dtype_fn(variant, dts)]) for o in op.outputs)
        self.allocators = tuple((o.shape_fn, o.allocator(self.device)) for o in self.outputs)
        self.rows = op.dynamic_dim
        # the params the kernels take as arguments: part of the key, so each specialization holds its values
        self.scalars = [dims[n] for n in op.scalar_args]
        kernel, storages = R.kernel_for(op, arch or R.arch_for(self.device),
                                        *R.specialization(op, tensors, params, dims), schedule)
        self.launch = launcher(kernel, self.device)
        self.scratch = tuple((shape, R.TORCH_DTYPES[dt]) for shape, dt in scratch_of(kernel.prim_func))
        # the dtype each buffer is viewed as, None where the launch takes it as it is
        views = [R.TORCH_DTYPES[s] for s in storages]
        given = [tensors[op.inputs[j].name].dtype for j in present] + \
            [o.dtype for k, o in enumerate(self.outputs) if R.written_in(op.outputs[k], tensors, params)]
        views = [None if g == v or (not self.launch.exact_dtypes and g.itemsize == v.itemsize) else v
                 for g, v in zip(given, views)]
        self.inputs = tuple((j, op.inputs[j].flat, v) for j, v in zip(present, views))
        written = [k for k, o in enumerate(op.outputs) if R.written_in(o, tensors, params)]
        self.written = tuple((k, v) for k, v in zip(written, views[len(present):]))

    @staticmethod
    def _runtime_reads(op, site, tensors, variant):
        """Where each runtime dim is read (dim, input, position, factor), replaying the order in which
        `check` binds dims, and (input, logical shape function, packet) of each input whose shape
        involves a runtime dim."""
        sources, seen, shapes = [], set(), []
        for j, info in enumerate(op.inputs):
            if tensors[info.name] is None:
                continue
            packet = info.codec(variant)["packet"] if info.codec else (1, 1)
            keep = site.keys[j]
            if len(range(len(info.shape))[keep] if type(keep) is slice else keep) < len(info.shape):
                shapes.append((j, info.shape_fn, packet))
            for i, b in enumerate(info.binds):
                if b is None or b[0] in seen:
                    continue
                if i == len(info.shape) - 1 and packet != (1, 1):
                    if b[0] in site.runtime_dims:
                        raise NotFast
                    continue
                seen.add(b[0])
                if b[0] in site.runtime_dims:
                    sources.append((b[0], j, i, b[1]))
        return tuple(sources), tuple(shapes)

    def bind(self, tensors) -> Optional[dict]:
        """The call's dims if every rule that involves a runtime dim holds, else None."""
        if not self.fast:
            return None
        d = self.dims.copy()
        for name, j, i, factor in self.sources:
            size = tensors[j].shape[i]
            if size % factor:
                return None
            d[name] = size // factor
        for name, lo, hi in self.bounds:
            if d[name] < lo or (hi is not None and d[name] > hi):
                return None
        for j, shape_fn, packet in self.shapes:
            if tensors[j].shape != R.container_shape(shape_fn(d), packet):
                return None
        for rule in self.requires:
            if not rule(d):
                return None
        if self.params:
            for p in self.params:
                try:
                    R._check_param(self.op, p, d[p.name], dict(d))
                except ValueError:
                    return None
        return d

    def allocate(self, d, device=None):
        if device is not None:
            return tuple(o.empty(d, device) for o in self.outputs)
        return tuple([empty(shape(d)) for shape, empty in self.allocators])

    def buffers(self, tensors, outs):
        """What the kernel takes: the inputs (given in `op.inputs` order, None where absent) and the
        outputs it writes, as the buffers it declares, viewed as its storage dtypes."""
        bufs = [_viewed(tensors[j].reshape(-1) if flat else tensors[j], v) for j, flat, v in self.inputs]
        bufs += [_viewed(self.outputs[k].buffer(outs[k]), v) for k, v in self.written]
        return bufs + [torch.empty(shape, dtype=dt, device=self.device) for shape, dt in self.scratch] + self.scalars

    def run(self, tensors, outs):
        if self.cuda_index is not None and torch._C._cuda_getDevice() != self.cuda_index:
            with torch.cuda.device(self.device):
                self.launch(self.buffers(tensors, outs))
        else:
            self.launch(self.buffers(tensors, outs))


class Output:
    """How one output of one variant is allocated, and the buffer its kernel writes."""

    def __init__(self, info, variant, dtype):
        self.shape_fn = info.shapes[variant]
        self.dtype = dtype
        self.pad = info.col_pad(variant) if info.col_pad else None
        self.accumulate = info.accumulate
        self.flat = info.at is not None and not info.rows
        self.fill = info.fill

    def empty(self, d, device):
        return self.allocator(device)(self.shape_fn(d))

    def allocator(self, device):
        """shape -> an uninitialized output (zeros where kernels add into it) on `device`."""
        if self.pad:
            return lambda shape: col_major_empty(shape, self.pad, self.dtype, device)
        if self.fill is not None:
            return partial(torch.full, fill_value=self.fill, dtype=self.dtype, device=device)
        return partial(torch.zeros if self.accumulate else torch.empty, dtype=self.dtype, device=device)

    def buffer(self, t):
        """The whole padded buffer behind a column-major view, a flat output flat, else the output."""
        if self.pad:
            return col_major_storage(t, self.pad)
        return t.reshape(-1) if self.flat else t


def _viewed(t, dtype):
    return t if dtype is None else t.view(dtype)


def allocate(op, tensors, params, dims=None):
    """Empty outputs of the right container shapes and dtypes, on the inputs' device."""
    tensors, params = R.complete(op, tensors, params)
    dims = dims if dims is not None else R.check(op, tensors, params)
    variant = R.variant_of(op, params, tensors)
    device = next(t for t in tensors.values() if t is not None).device
    dts = R.input_dtypes(op, tensors)
    return tuple(Output(o, variant, R.TORCH_DTYPES[o.dtype_fn(variant, dts)]).empty(dims, device) for o in op.outputs)


def prepare(op, tensors, params, arch=None, schedule=None, out=None, dims=None):
    """Everything a launch needs, resolved once: (launch(), outputs). For benchmarks and tuning.

    `dims`: the result of `check` when the caller has already checked the arguments."""
    tensors, params = R.complete(op, tensors, params)
    dims = dims if dims is not None else R.check(op, tensors, params)
    spec = _specialization(op, tensors, params, dims, arch, schedule)
    outs = tuple(out) if out is not None else spec.allocate(dims)
    if op.dynamic_dim is not None and dims[op.dynamic_dim] == 0:
        return (lambda: None), outs
    bufs = spec.buffers(R._ordered(op, tensors), outs)
    return (lambda: spec.launch(bufs)), outs


def _specialization(op, tensors, params, dims, arch=None, schedule=None):
    key = site_of(op).key(R._ordered(op, tensors), tuple(params[p.name] for p in op.params))
    return site_of(op).specialization(tensors, params, dims, key, arch, schedule)


def run(op, tensors, params, arch: Optional[str] = None, out=None, schedule=None):
    """Check, allocate (or take `out`), pick the kernel for the device (or `arch`), launch.

    `out` lets tests pass poisoned outputs, so that elements a kernel fails to write show up, and callers
    pass accumulators: outputs that kernels add into (sums over rows, counts) are added into as given.
    Without `out`, an output written in place (`into:`) is its input, which the call mutates.
    `schedule`: knobs in place of the profile's (tuning candidates). Calls without these go through
    `call`, as the generated entry points do.
    """
    tensors, params = R.complete(op, tensors, params)
    dims = R.check(op, tensors, params)
    spec = _specialization(op, tensors, params, dims, arch, schedule)
    if out is None:
        outs = _into_inputs(op, R._ordered(op, tensors), spec.allocate(dims))
    else:
        outs = tuple(out)
        for o, w in zip(outs, spec.allocate(dims, torch.device("meta"))):     # shapes only
            if o.shape != w.shape or o.dtype != w.dtype or (o.numel() > 1 and o.stride() != w.stride()):
                raise ValueError(f"{op.name}: an `out` tensor must be {w.dtype} of shape {tuple(w.shape)} "
                                 f"and strides {tuple(w.stride())}")
    if op.dynamic_dim is None or dims[op.dynamic_dim] != 0:
        spec.run(R._ordered(op, tensors), outs)
    return outs
