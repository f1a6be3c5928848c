"""The generic half of every generated op: argument checks, output allocation, device dispatch, launch.

A generated `op.py` describes its op as data (an `OpInfo`) and calls into this module; nothing here knows
any operator. Checks run before any launch and raise TypeError (wrong kind or dtype) or ValueError (wrong
rank, shape, device, layout, param), naming the argument and the rule it broke.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch

from .compile import compile_kernel
from .compile_caches import tag_for
from .kernels import arch_for_capability, kernel_module
from .schedule import vector_granule

TORCH_DTYPES = {
    "fp32": torch.float32, "bf16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64,
    "e4m3": torch.float8_e4m3fn,
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2, "uint8": torch.uint8, "int8": torch.int8, "uint16": torch.uint16,
    "int16": torch.int16, "float16": torch.float16,
}


@dataclass(frozen=True)
class ParamInfo:
    name: str
    choices: Optional[Tuple]           # values; a str naming a dim stands for that dim's size
    range: Optional[Callable]          # dims -> (low, high)
    structural: bool
    doc: str
    default: object = None
    kind: str = "int"                  # int | str | float
    optional: bool = False             # a float param that may be None (its own variant, `with_<name>`)


@dataclass(frozen=True)
class InputInfo:
    name: str
    dtypes: Tuple[str, ...]
    shape: Tuple[str, ...]             # per dim: a dim name to bind, or an expression text checked after binding
    shape_fn: Callable                 # dims -> expected logical shape
    optional: bool = False             # may be None
    binds: Tuple = ()                  # per tensor dim: (dim, factor) when its size is factor * dim, else None
    like: Optional[str] = None         # must have the dtype of this input
    codec: Optional[Callable] = None   # variant -> codec dict of an input declared with a format (see below)
    at: Optional[str] = None           # read at the flat positions this input holds (passed to kernels flat)
    rows: bool = False                 # with `at`: its rows are read at the positions (passed as it is)
    strided: bool = False              # the kernel takes its strides: any view whose last dim is contiguous
    together: Optional[str] = None     # optional, given together with this optional input (both or neither)

    @property
    def flat(self) -> bool:
        return self.at is not None and not self.rows

    @property
    def dtype_arg(self) -> bool:
        """Whether the kernel factory takes this input's dtype (several allowed, not tied to another)."""
        return len(self.dtypes) > 1 and self.like is None

    # A codec dict: {"kind": "element" | "scale", "name": format, "container": torch dtype name,
    # "packet": (codes, container elements): `codes` logical elements of the last dim take that many
    # container elements, "pack": Packing key or None, "store": how a scale is stored}.
    def container_shape(self, dims, variant):
        shape = tuple(self.shape_fn(dims))
        return container_shape(shape, self.codec(variant)["packet"]) if self.codec else shape


def by_variant(groups: dict, variants: tuple = (), other=None) -> dict:
    """{variant: value} from {(variant, ...): value}: a generated op module writes each value of its
    per-variant tables once. Given `variants` (every variant's name, in order), the table holds each of
    them, and those no group names take `other` (the value most variants take, whose names are not written)."""
    table = {name: value for names, value in groups.items() for name in names}
    return {name: table.get(name, other) for name in variants} if variants else table


def container_shape(shape: tuple, packet) -> tuple:
    """A logical shape as its container holds it: `codes` logical elements of the last dim in `elems`
    container elements (packet (1, 1): unpacked)."""
    codes, elems = packet
    if packet == (1, 1) or not shape:
        return shape
    return shape[:-1] + (-(-shape[-1] // codes) * elems,)


@dataclass(frozen=True)
class OutputInfo:
    name: str
    shapes: Dict[str, Callable]        # variant -> (dims -> container shape)
    dtype_fn: Callable                 # (variant, {input: dtype name}) -> torch dtype name of the container
    exact: object = "bit"              # bit | bytes | {"ulp": n, "rate": r} | {"tol": {...}} | {"given": [...]}
    when: Optional[str] = None         # written only when this optional input or optional param is given, or
                                       # this boolean param is true (else empty)
    accumulate: bool = False           # a sum over the rows or a count: every block adds into it, so it starts at 0
    col_pad: Optional[Callable] = None  # variant -> None (row-major) or the row padding of a column-major layout
    row_dim: Optional[int] = None      # the dim indexed by the rows (keep_rows leaves the rows not kept untouched)
    at: Optional[str] = None           # added into at the flat positions this input holds (passed to kernels flat)
    rows: bool = False                 # with `at`: its rows are stored at the positions, into zeros
    into: Optional[str] = None         # written into this input's storage (the op mutates it; not returned)
    returned_with: Optional[str] = None  # tkgen.ops returns it only when this optional input is given
    padding: Optional[str] = None      # with `rows`: the input marking its padding rows (< 0), which the kernel zeroes
    fill: Optional[int] = None         # with `at` (flat): allocated holding this value; kernels store at positions

    def shape_fn(self, dims, variant):
        """The container shape of this output in a variant."""
        return self.shapes[variant](dims)


@dataclass(frozen=True)
class OpInfo:
    name: str
    package: str
    params: Tuple[ParamInfo, ...]
    inputs: Tuple[InputInfo, ...]
    outputs: Tuple[OutputInfo, ...]
    dims: Tuple[Tuple[str, bool, int, Optional[int]], ...]      # (name, dynamic, min, max)
    requires: Tuple[Tuple[str, Callable], ...]
    factory_args: Tuple[str, ...]
    scalar_args: Tuple[str, ...] = ()   # params the kernels take as arguments, after the tensors (runtime: true)

    def __post_init__(self):
        tag_for(self.package)     # torch.compile's caches follow the ops' schemas and formulas

    @property
    def dynamic_dim(self):
        """The dim of the rows (other dynamic dims, sizes of tensors addressed at positions, are not marked)."""
        return next((d[0] for d in self.dims if d[1]), None)


def complete(op: OpInfo, tensors, params):
    """The arguments with every optional input the caller left out as None and every param left out at
    its default (callers of this module may name only what they give)."""
    return ({i.name: tensors.get(i.name) for i in op.inputs},
            {p.name: params.get(p.name, p.default) for p in op.params})


def _dtype_name(dt: torch.dtype) -> str:
    return {v: k for k, v in TORCH_DTYPES.items() if k in ("fp32", "bf16", "e4m3", "int32", "int64")}.get(dt, str(dt))


def stride_granule(t: torch.Tensor) -> int:
    """The elements a kernel may load at once from strided input `t` (tkgen/runtime/schedule.py:
    vector_granule, the rule its factory assumed)."""
    return vector_granule(str(t.dtype).split(".")[-1], t.shape[-1] if t.dim() else 1)


def strides_aligned(t: torch.Tensor) -> bool:
    """Whether a strided input meets its kernel's assumption: each stride (of a dim longer than 1) a
    multiple of the granule, and the data starting on a granule."""
    g = stride_granule(t)
    return t.data_ptr() % (g * t.element_size()) == 0 and \
        all(st % g == 0 for n, st in zip(t.shape[:-1], t.stride()[:-1]) if n > 1)


def strided_as_is(t: torch.Tensor) -> bool:
    """Whether a kernel takes `t` for a strided input without a copy: contiguous, or its last dim
    contiguous and its strides on the kernel's loads."""
    return t.is_contiguous() or (t.stride(-1) == 1 and strides_aligned(t))


def check(op: OpInfo, tensors: Dict[str, object], params: Dict[str, object]) -> Dict[str, int]:
    """Validate arguments; return the bound sizes (dims and params) of this call."""
    tensors, params = complete(op, tensors, params)
    device = None
    dims: Dict[str, int] = {}
    for info in op.inputs:
        paired = info.at and next(i for i in op.inputs if i.name == info.at).optional   # given together
        if paired and (tensors[info.name] is None) != (tensors[info.at] is None):
            raise ValueError(f"{op.name}: `{info.name}` is read at the positions in `{info.at}`: give both or neither")
        if info.together and (tensors[info.name] is None) != (tensors[info.together] is None):
            raise ValueError(f"{op.name}: `{info.name}` goes with `{info.together}`: give both or neither")
    for info in op.inputs:
        t = tensors[info.name]
        if t is None and info.optional:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op.name}: argument `{info.name}` must be a torch.Tensor, got {type(t).__name__}")
        if info.codec is None:
            allowed = [TORCH_DTYPES[d] for d in info.dtypes]
            if t.dtype not in allowed:
                raise TypeError(f"{op.name}: argument `{info.name}` must have dtype "
                                f"{' or '.join(str(a) for a in allowed)}, got {t.dtype}")
        if info.like and tensors[info.like] is not None and t.dtype != tensors[info.like].dtype:
            raise TypeError(f"{op.name}: argument `{info.name}` must have the dtype of `{info.like}` "
                            f"({tensors[info.like].dtype}), got {t.dtype}")
        if t.dim() != len(info.shape):
            raise ValueError(f"{op.name}: argument `{info.name}` must have rank {len(info.shape)} "
                             f"(shape [{', '.join(info.shape)}]), got shape {tuple(t.shape)}")
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{op.name}: argument `{info.name}` is on {t.device}; expected a cpu or cuda tensor")
        if device is not None and t.device != device:
            raise ValueError(f"{op.name}: argument `{info.name}` is on {t.device} but earlier arguments are on {device}")
        device = t.device
        if info.strided:
            if t.dim() and t.stride(-1) != 1:
                raise ValueError(f"{op.name}: argument `{info.name}` must have a contiguous last dim (stride 1), "
                                 f"got strides {tuple(t.stride())}")
            if not t.is_contiguous() and not strides_aligned(t):     # a contiguous one is laid out as assumed
                g = stride_granule(t)
                raise ValueError(f"{op.name}: argument `{info.name}` must start on {g * t.element_size()} bytes and "
                                 f"have strides that are multiples of {g}, as a contiguous tensor of its shape (the "
                                 f"kernel loads {g} elements at a time), got strides {tuple(t.stride())}; call "
                                 f".contiguous()")
        elif not t.is_contiguous():
            raise ValueError(f"{op.name}: argument `{info.name}` must be contiguous (row-major); call .contiguous()")
    # structural params first: they pick the formats, which fix the containers of format-typed inputs
    for p in op.params:
        if p.structural:
            _check_param(op, p, params[p.name], dims)
    variant = variant_of(op, params, tensors)
    for info in op.inputs:
        t = tensors[info.name]
        if t is None:
            continue
        codec = info.codec(variant) if info.codec else None
        if codec is not None and t.dtype != TORCH_DTYPES[codec["container"]]:
            raise TypeError(f"{op.name}: argument `{info.name}` holds {codec['name']} codes and must have dtype "
                            f"{TORCH_DTYPES[codec['container']]}, got {t.dtype}")
        codes, elems = codec["packet"] if codec else (1, 1)
        for i, (size, b) in enumerate(zip(t.shape, info.binds)):
            if b is None or b[0] in dims:
                continue
            size = int(size)
            if i == len(info.shape) - 1 and (codes, elems) != (1, 1):
                if codec["kind"] == "scale":
                    continue                 # packed scales may end in a partial word: bound elsewhere
                if size % elems:
                    raise ValueError(f"{op.name}: argument `{info.name}` packs {codes} {codec['name']} codes in "
                                     f"{elems} elements; its last dim {size} is not a multiple of {elems}")
                size = size // elems * codes
            if size % b[1]:
                raise ValueError(f"{op.name}: argument `{info.name}` has a dim of size {size}, which "
                                 f"must be a multiple of {b[1]} (shape [{', '.join(info.shape)}])")
            dims[b[0]] = size // b[1]
    for name, dynamic, lo, hi in op.dims:
        if name not in dims:
            continue
        if dims[name] < lo or (hi is not None and dims[name] > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise ValueError(f"{op.name}: size {name} must be {bound}, got {dims[name]}")
    # a range may name a param declared after it (`tp_rank` in [0, num_tp_ranks - 1]): checked once that
    # param is; a pass that checks none means ranges naming each other, and the KeyError is raised
    pending = [p for p in op.params if not p.structural]
    while pending:
        deferred = []
        for p in pending:
            try:
                _check_param(op, p, params[p.name], dims)
            except KeyError:
                deferred.append(p)
        if len(deferred) == len(pending):
            raise KeyError(f"{op.name}: the ranges of {', '.join(p.name for p in deferred)} name each other")
        pending = deferred
    for info in op.inputs:
        if tensors[info.name] is None:
            continue
        want = info.container_shape(dims, variant)
        got = tuple(tensors[info.name].shape)
        if got != want:
            raise ValueError(f"{op.name}: argument `{info.name}` must have shape [{', '.join(info.shape)}] "
                             f"= {want}" + (" (packed)" if want != tuple(info.shape_fn(dims)) else "") +
                             f", got {got}")
    for text, rule in op.requires:
        if not rule(dims):
            raise ValueError(f"{op.name}: requirement `{text}` does not hold "
                             f"({', '.join(f'{k}={v}' for k, v in dims.items() if k in text)})")
    return dims


def _check_param(op, p, v, dims):
    if p.optional and v is None:
        pass
    elif p.kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{op.name}: `{p.name}` must be a number{' or None' if p.optional else ''}; got {v!r}")
        try:
            v = float(v)
        except OverflowError:   # an int past a float's range (10**400)
            raise ValueError(f"{op.name}: `{p.name}` must be a number within a float's range; got an integer "
                             f"of {v.bit_length()} bits") from None
    elif p.choices is not None:
        if isinstance(v, str) and not p.structural and v in p.choices and v in dims:
            v = dims[v]                  # a choice that names a dim ("H"): its size (bound from the inputs)
        allowed = [dims.get(c, c) if isinstance(c, str) and not p.structural else c for c in p.choices]
        if isinstance(v, bool) != isinstance(allowed[0], bool) or not isinstance(v, type(allowed[0])) \
                or v not in allowed:
            shown = ", ".join(f"{c} (= {dims[c]} here)" if isinstance(c, str) and c in dims and not p.structural
                              else repr(c) for c in p.choices)
            raise ValueError(f"{op.name}: `{p.name}` must be one of {shown}; got {v!r}")
    else:
        lo, hi = p.range(dims)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"{op.name}: `{p.name}` must be an integer in [{lo}, {hi}]; got {v!r}")
    dims[p.name] = v


def variant_of(op: OpInfo, params, tensors) -> str:
    """The generated variant serving these params and this presence of optional inputs."""
    params = {p.name: params.get(p.name, p.default) for p in op.params}
    values = [str(params[p.name]).lower() if isinstance(params[p.name], bool) else str(params[p.name])
              for p in op.params if p.structural]
    # an input given together with another (`with:`) goes by that one's name
    values += [f"with_{i.name}" for i in op.inputs if i.optional and not i.together and tensors.get(i.name) is not None]
    values += [f"with_{p.name}" for p in op.params if p.optional and params[p.name] is not None]
    return "_".join(values) or "base"


def input_dtypes(op: OpInfo, tensors) -> Dict[str, str]:
    return {i.name: _dtype_name(tensors[i.name].dtype) for i in op.inputs if tensors[i.name] is not None}



_ARCH_LOCK = threading.Lock()
_ARCH_OF_DEVICE: Dict[object, str] = {}


def arch_for(device: torch.device) -> str:
    """The architecture profile serving a device: `cpu`, or the CUDA profile matching its capability."""
    if device.type == "cpu":
        return "cpu"
    with _ARCH_LOCK:
        if device not in _ARCH_OF_DEVICE:
            _ARCH_OF_DEVICE[device] = arch_for_capability(*torch.cuda.get_device_capability(device))
        return _ARCH_OF_DEVICE[device]


def kernel_for(op: OpInfo, arch: str, variant: str, static_args: tuple, dtypes: tuple, schedule=None):
    """(compiled kernel, storage dtypes) of one specialization on an architecture profile."""
    return compile_kernel(kernel_module(op.package, arch), variant, static_args + dtypes, schedule)


def specialization(op: OpInfo, tensors, params, dims):
    """(variant, factory args, input dtype names): what picks and builds one compiled kernel."""
    statics = tuple(dims[a] for a in op.factory_args)
    dtypes = tuple(_dtype_name(tensors[i.name].dtype) if tensors[i.name] is not None else i.dtypes[0]
                   for i in op.inputs if i.dtype_arg)
    return variant_of(op, params, tensors), statics, dtypes


def _ordered(op: OpInfo, tensors: dict) -> tuple:
    return tuple(tensors[i.name] for i in op.inputs)


def written_in(info: OutputInfo, tensors, params) -> bool:
    """Whether a call writes an output: its `when` input or optional param is given, or its `when`
    boolean param is true."""
    if info.when is None:
        return True
    if info.when not in params:
        return tensors[info.when] is not None
    v = params[info.when]
    return v is True or (v is not None and not isinstance(v, bool))
