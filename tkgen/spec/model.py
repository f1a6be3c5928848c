"""Stage 2 of the pipeline: the typed model built from schema-checked documents.

Here every name in a spec is resolved: params, dims, axes, tensors, formats and the values that compute
stages define. Whatever is wrong is reported at its position in the file. The model is what lowering and
the emitters consume; they never look at raw YAML.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from . import checks
from . import expr as E
from . import formats as F
from . import safety
from .loader import Document, SpecError, read
from .safety import listing, short

BUILTIN_DTYPES = ("int32", "int64")
RESERVED = {"T", "load", "max", "min", "abs"}


@dataclass(frozen=True)
class Param:
    name: str
    doc: str
    choices: Optional[Tuple]          # one_of
    range: Optional[Tuple]            # (low expr, high expr)
    default: object
    kind: str = "int"                 # int | str | float (float params have neither one_of nor range)
    test_values: Tuple = ()           # float params: the values the strategies draw
    optional: bool = False            # float params: may be None; each presence compiles its own kernel
    absent: Optional[float] = None    # optional float params: their value in compute when None
    appended: bool = False            # added to a released op: after every other argument (api-conventions.md)
    runtime: bool = False             # an integer param the kernel takes as an argument: no kernel per value

    @property
    def structural(self) -> bool:
        """String- or boolean-valued params select code (a format, a rule, a layout): each value is its own
        generated kernel."""
        return self.choices is not None and (all(isinstance(v, str) for v in self.choices) or self.boolean)

    @property
    def boolean(self) -> bool:
        return self.choices is not None and all(isinstance(v, bool) for v in self.choices)


@dataclass(frozen=True)
class Dim:
    name: str
    doc: str
    dynamic: bool
    min: int
    max: Optional[int]
    require: Tuple[Tuple[str, E.Node], ...]
    test_values: Tuple[int, ...]


@dataclass(frozen=True)
class Axis:
    name: str
    extent: E.Node
    text: str


@dataclass(frozen=True)
class Tensor:
    name: str
    role: str                                # input | output
    doc: str
    dtypes: Tuple[str, ...]                  # element formats / integer types it may have (inputs)
    format_ref: Optional[str]                # an element-format name or a param naming one
    scale_ref: Optional[str]                 # a scale-format name or a param naming one
    layout_ref: Optional[str]                # a layout name or a param naming one (None: row-major)
    shape: Tuple[E.Node, ...]
    shape_text: Tuple[str, ...]
    view: Tuple[Tuple[str, ...], ...]        # per tensor dim, the axes (major first) that index it
    exact: object
    values: dict
    layouts: Tuple[tuple, ...] = ()          # (boolean param, shape, shape text, view): the layout when it is true
    optional: bool = False                   # inputs: may be None; each presence compiles its own kernel
    absent: Optional[float] = None           # inputs: the value `load` gives when the input is None
    like: Optional[str] = None               # same element type as this input (its dtype at the call)
    when: Optional[str] = None               # outputs: written only when this optional input or optional
                                             # param is given, or this boolean param is true
    at: Optional[str] = None                 # an integer input holding positions in this tensor: flat (no view),
                                             # or of its rows (dim 0) when the tensor has a view of its other dims
    # inputs: one dim split into named segments of unequal length, read one at a time (`load(kv, k)`):
    # (dim, ((segment, axes), ...)); the view holds that dim's axes, each once, in order
    segments: Optional[Tuple[int, Tuple[Tuple[str, Tuple[str, ...]], ...]]] = None
    row_view: Optional[Tuple[Tuple[str, ...], ...]] = None   # rows at positions: the view of dims 1..
    into: Optional[str] = None               # outputs: stored into this input's storage, which the op mutates
    padding: Optional[str] = None            # rows-at outputs: the input marking padding rows (< 0)
    fill: Optional[int] = None               # flat at-outputs: the value elsewhere; elements stored, not added
    strided: bool = False                    # inputs: the kernel takes its strides (last dim contiguous); an
                                             # output `into` it inherits them
    together: Optional[str] = None           # optional inputs: given together with this optional input (`with:`)
    appended: bool = False                   # optional inputs added to a released op: after every other argument
    returned_with: Optional[str] = None      # outputs added to a released op: `tkgen.ops` returns it only when
                                             # this optional input is given (the custom op returns every output)

    def segment_axes(self, segment: str) -> Tuple[str, ...]:
        """The axes of a load of one segment: the view with the segmented dim indexed by its own axes."""
        dim, parts = self.segments
        group = dict(parts)[segment]
        return tuple(a for i, g in enumerate(self.view) for a in (group if i == dim else g))

    @property
    def axes(self) -> Tuple[str, ...]:
        return tuple(a for group in self.view for a in group)

    def resolved(self, variant: dict) -> "Tensor":
        """The tensor's layout in one variant: the `when` layout of the first boolean param that is true."""
        for param, shape, text, view in self.layouts:
            if variant.get(param) is True:
                return dataclasses.replace(self, shape=shape, shape_text=text, view=view, layouts=())
        return dataclasses.replace(self, layouts=()) if self.layouts else self


@dataclass(frozen=True)
class Stage:
    index: int
    targets: Tuple[str, ...]
    value: E.Node
    text: str


@dataclass
class Arch:
    name: str
    doc: str
    backend: str
    capability: Optional[Tuple[int, int]]
    target: object
    tile_memory: str
    loops: str
    threads: int
    vector_bytes: int
    tile_elems: int
    native_formats: Tuple[str, ...]
    pass_configs: dict
    compile_flags: Tuple[str, ...]
    tuned: dict
    path: Path
    pad_reduced: bool = False
    max_skips_nan: bool = True             # whether the target's float max reductions skip NaN (fmaxf)
    native_casts_saturate: bool = False    # whether native casts to saturating formats saturate (satfinite)
    persistent_blocks: int = 1             # blocks of a persistent grid (a few per multiprocessor)
    max_tile_bytes: Optional[int] = None   # the most bytes the tiles of a block may take (None: no bound)
    passes: Optional[tuple] = None         # the schedule's pipeline of passes (None: the backend's default)


@dataclass
class OpSpec:
    name: str
    family: str
    doc: str
    path: Path
    sha256: str
    params: Dict[str, Param]
    dims: Dict[str, Dim]
    axes: Dict[str, Axis]
    inputs: Dict[str, Tensor]
    outputs: Dict[str, Tensor]
    stages: Tuple[Stage, ...]
    schedule: dict
    workloads: tuple
    tests: dict
    doc_ref: Document = field(repr=False, default=None)
    row_inner: Optional[str] = None          # rows inside a row block, when the first axis is ceildiv(T, n)
    backward: Optional[dict] = None           # the autograd formula (tkgen/spec/autograd.py)

    @property
    def tensors(self) -> Dict[str, Tensor]:
        return {**self.inputs, **self.outputs}

    @property
    def dynamic_dim(self) -> Optional[str]:
        """The dynamic dim of the rows: the one the first axis runs over (other dynamic dims only size
        tensors addressed `at:` positions)."""
        dyn = [d.name for d in self.dims.values() if d.dynamic]
        if len(dyn) < 2:
            return dyn[0] if dyn else None
        return next(d for d in dyn if d in E.names(next(iter(self.axes.values())).extent))

    @property
    def structural_params(self):
        return [p for p in self.params.values() if p.structural]

    @property
    def static_params(self):
        """The numeric params the kernel factory takes: one kernel per value."""
        return [p for p in self.params.values() if not p.structural and not p.runtime]

    @property
    def runtime_params(self):
        """The integer params the kernels take as arguments (`runtime: true`): one kernel serves every value."""
        return [p for p in self.params.values() if p.runtime]

    @property
    def value_params(self):
        """The numeric params the reference takes: the factory's and the kernels' runtime ones."""
        return [p for p in self.params.values() if not p.structural]

    @property
    def optional_inputs(self):
        return [t.name for t in self.inputs.values() if t.optional]

    @property
    def optional_params(self):
        return [p.name for p in self.params.values() if p.optional]

    def call_order(self) -> List[str]:
        """The custom op's (and `invoke`'s) argument order: inputs, then params, in declaration order, then
        the appended ones (inputs, then params): arguments added to a released op come after the existing
        ones, so the calls written before them keep working (docs/api-conventions.md)."""
        first = [n for n, t in self.inputs.items() if not t.appended] + [n for n, p in self.params.items() if not p.appended]
        return first + [n for n, t in self.inputs.items() if t.appended] + [n for n, p in self.params.items() if p.appended]

    def variants(self):
        """Every combination of structural params and the presence of optional inputs and optional params:
        one kernel factory each.

        Presence is keyed `?<input>` (or `?<param>`) in the variant dict, inputs first. An input read `at:`
        the positions of another, or declared `with:` another, is given together with it: the combinations
        where one is missing are left out."""
        sp = self.structural_params
        opt = self.optional_inputs + self.optional_params
        for combo in itertools.product(*(p.choices for p in sp), *([(False, True)] * len(opt))):
            v = dict(zip((p.name for p in sp), combo[:len(sp)]))
            v.update({f"?{n}": b for n, b in zip(opt, combo[len(sp):])})
            if any(t.optional and (t.at or t.together) and f"?{t.at or t.together}" in v
                   and v[f"?{t.name}"] != v[f"?{t.at or t.together}"] for t in self.inputs.values()):
                continue
            yield v

    def variant_name(self, variant: dict) -> str:
        """The variant's name: its structural params' values, then `with_<name>` for each optional input or
        param given. An input declared `with:` another is given exactly when that one is, and goes by its
        name (the runtime names variants the same way: tkgen/runtime/ops.py, variant_of)."""
        parts = [str(v).lower() if isinstance(v, bool) else str(v) for k, v in variant.items() if not k.startswith("?")]
        parts += [f"with_{k[1:]}" for k, v in variant.items() if k.startswith("?") and v
                  and not (k[1:] in self.inputs and self.inputs[k[1:]].together)]
        return "_".join(parts) or "base"

    @staticmethod
    def writes(t: Tensor, variant: dict) -> bool:
        """Whether a variant writes an output: always, unless its `when` names an optional input or param
        that is absent (`?<name>` false) or a boolean param that is false."""
        return not t.when or bool(variant.get(f"?{t.when}", variant.get(t.when)))

    def resolved(self, variant: dict) -> "OpSpec":
        """The spec as one variant sees it: every tensor in the layout its boolean params select."""
        if not any(t.layouts for t in self.tensors.values()):
            return self
        return dataclasses.replace(self, inputs={n: t.resolved(variant) for n, t in self.inputs.items()},
                                   outputs={n: t.resolved(variant) for n, t in self.outputs.items()})


@dataclass
class Catalog:
    """Everything under a specs directory: operators, number formats and architecture profiles."""

    root: Path
    ops: Dict[str, OpSpec]
    elements: Dict[str, F.ElementFormat]
    scales: Dict[str, F.ScaleFormat]
    archs: Dict[str, Arch]
    documents: Dict[Path, Document]
    layouts: Dict[str, F.Layout] = field(default_factory=dict)

    def op(self, name: str) -> OpSpec:
        if name not in self.ops:
            raise KeyError(f"no operator {name!r}; known: {', '.join(sorted(self.ops))}")
        return self.ops[name]

    def element(self, name: str) -> F.ElementFormat:
        return self.elements[name]

    def resolve_format(self, spec: OpSpec, ref: str, variant: dict, kind: str):
        """A tensor's format reference: a format name, or a param whose value in this variant names one."""
        name = variant.get(ref, ref)
        table = {"element": self.elements, "scale": self.scales, "layout": self.layouts}[kind]
        return table[name]


def _parse(doc: Document, path, text):
    try:
        return E.parse(text)
    except E.ExprError as e:
        raise doc.error(path, e.message + (f" in {short(e.text, 80)}" if e.text else ""), col_offset=e.col) from None


def _check_names(doc, path, node, known, what, offered=None):
    """Every name of `node` in `known`; an unknown one is reported with the names of `offered` (default:
    `known`), the closest first: a shape offers the dims and integer params, never a string param."""
    for n in E.names(node):
        if n not in known:
            offered = sorted(known if offered is None else offered)
            raise doc.error(path, f"unknown name {short(n)} in {what}{safety.did_you_mean(n, offered)} "
                                  f"(expected one of {listing(offered)})")


def _no_runtime_param(doc, path, node, params, what):
    """A runtime param is a kernel argument, not a size: it may not shape, extend or constrain anything the
    kernel factory decides."""
    for n in E.names(node):
        if n in params and params[n].runtime:
            raise doc.error(path, f"{n!r} is a runtime param (a value the kernel takes as an argument): it cannot "
                                  f"appear in {what}; only in compute, or drop `runtime`")


def _row_dim(doc, dims, first, axes):
    """The dynamic dims, the rows' first: the one the first axis runs over. Any other dynamic dim is a
    runtime size of tensors addressed `at:` positions, and no axis may run over it."""
    dyn = [x.name for x in dims.values() if x.dynamic]
    if len(dyn) < 2:
        return dyn
    rows = [n for n in dyn if n in E.names(first.extent)]
    if len(rows) != 1:
        raise doc.error(("axes", first.name), f"the first axis runs over the rows: one of the dynamic dims {dyn}")
    for a in axes.values():
        used = [n for n in E.names(a.extent) if n in dyn and n != rows[0]]
        if used:
            raise doc.error(("axes", a.name), f"{used[0]!r} is a runtime size besides the rows: no axis may run over it")
    return rows + [n for n in dyn if n != rows[0]]


def _resolve_like(inputs):
    """An input `like` an input of one plain dtype has that dtype: there is nothing to tie at the call, and
    the kernels take no dtype argument for either (the lowering found none for it)."""
    def fix(t):
        src = inputs.get(t.like) if t.like else None
        if src is None or src.like or len(src.dtypes) != 1 or src.format_ref or src.scale_ref:
            return t
        return dataclasses.replace(t, like=None, dtypes=src.dtypes)
    return {n: fix(t) for n, t in inputs.items()}


def _check_padding(doc, inputs, outputs):
    """An output whose padding rows the kernel zeroes: rows stored at positions, and an integer input with
    one entry per row of it (its first dim)."""
    for name, t in outputs.items():
        if t.padding is None:
            continue
        base = ("outputs", name, "padding")
        src = inputs.get(t.padding)
        if t.row_view is None:
            raise doc.error(base, "`padding` marks rows of an output whose rows are stored at positions "
                                  "(`at:` with a view)")
        if src is None or src.optional or not src.dtypes or any(d not in ("int32", "int64") for d in src.dtypes) or \
                src.shape_text != t.shape_text[:1]:
            raise doc.error(base, f"`padding` names a required integer input of shape [{t.shape_text[0]}], one entry "
                                  f"per row of {name!r}")


def _check_into(doc, inputs, outputs):
    """An output `into` an input is written over that input's elements: a required input of a plain type
    that the output has, with the same shape and view, so that each element is read by the thread that
    writes it, before it writes it (the kernel takes the one storage as both arguments)."""
    taken = {}
    for name, t in outputs.items():
        if t.into is None:
            continue
        base = ("outputs", name, "into")
        src = inputs.get(t.into)
        if src is None:
            raise doc.error(base, f"`into` names an input; inputs are {listing(inputs)}")
        if t.into in taken:
            raise doc.error(base, f"{t.into!r} already takes output {taken[t.into]!r}")
        taken[t.into] = name
        if src.optional or src.segments or src.format_ref or src.scale_ref:
            raise doc.error(base, f"{t.into!r} must be a required input of a plain dtype, viewed whole")
        if (src.at or t.at) and (src.at != t.at or src.row_view is not None or t.row_view is not None):
            raise doc.error(base, f"an output stored at flat positions is written into an input at the same "
                                  f"positions (`at: {t.at or src.at}` on both, without a view)")
        same_type = t.like == t.into or (not t.like and len(src.dtypes) == 1 and not src.like
                                         and t.dtypes == src.dtypes)
        if not same_type:
            raise doc.error(base, f"the output must have the type of {t.into!r}: `like: {t.into}` or its dtype")
        if t.shape_text != src.shape_text or t.view != src.view or t.layouts != src.layouts:
            raise doc.error(base, f"the output must have the shape and view of {t.into!r} (and its `when` layouts)")
        if t.when or t.layout_ref or t.fill is not None or t.padding:
            raise doc.error(base, "an output written in place has no `when`, `layout`, `fill` or `padding`")


def _resolve_at(doc, inputs, outputs):
    """Tensors addressed `at:` positions take the view of their positions input, which must hold integers.
    Their presence goes with it: an optional one is given together with its positions."""
    def fix(role, name, t):
        if not t.at:
            return t
        rows = bool(t.view)               # a view of the dims after the first: whole rows at positions
        pos = inputs[t.at]
        base = (role + "s", name, "at")
        if pos.at or not pos.dtypes or any(dt not in BUILTIN_DTYPES for dt in pos.dtypes):
            raise doc.error(base, f"{t.at!r} must be an integer input with a view (its elements are flat positions)")
        if role == "input" and pos.optional and not t.optional:
            raise doc.error(base, f"{name!r} is required, so its positions {t.at!r} are too")
        if rows and set(pos.axes) & set(t.axes):
            raise doc.error((role + "s", name, "view"), f"the view names axes of the positions {t.at!r}")
        return dataclasses.replace(t, view=pos.view + t.view, row_view=t.view if rows else None)
    return ({n: fix("input", n, t) for n, t in inputs.items()}, {n: fix("output", n, t) for n, t in outputs.items()})


def _row_inner(doc, dyn, first, axes):
    """The first axis runs over the dynamic dim: either `t: T` (one row per index), or `b: ceildiv(T, n)`
    (row blocks of n rows, the last one partial). For row blocks, returns the axis of extent n that indexes
    the rows inside a block."""
    ext = first.extent
    if isinstance(ext, E.Name) and ext.id == dyn:
        return None
    if isinstance(ext, E.Call) and ext.fn == "ceildiv" and len(ext.args) == 2 and \
            isinstance(ext.args[0], E.Name) and ext.args[0].id == dyn:
        size = E.to_source(ext.args[1])
        inner = [a.name for a in axes.values() if a is not first and E.to_source(a.extent) == size]
        if not inner:
            raise doc.error(("axes", first.name), f"row blocks ceildiv({dyn}, {size}) need an axis of extent {size} "
                                                  "for the rows inside a block")
        return inner[0]
    raise doc.error(("axes",), f"the first axis must run over the dynamic dim {dyn!r}: `{dyn}` or "
                               f"`ceildiv({dyn}, n)` (row blocks)")


def _check_row_groups(doc, base, view, shape, block_axis, inner, dyn):
    """With row blocks, the dynamic dim is indexed by [block, inner] and a dim of row blocks by [block]."""
    for i, group in enumerate(view):
        if block_axis not in group and inner not in group:
            continue
        is_dyn = isinstance(shape[i], E.Name) and shape[i].id == dyn
        if is_dyn and tuple(group) != (block_axis, inner):
            raise doc.error(base + ("view", i), f"the dynamic dim {dyn} is indexed by [{block_axis}, {inner}]")
        if not is_dyn and tuple(group) != (block_axis,):
            raise doc.error(base + ("view", i), f"axis {inner!r} indexes rows of {dyn} only, as [{block_axis}, {inner}]; "
                                                f"a dim of row blocks is indexed by {block_axis!r} alone")


def build_format(doc: Document):
    d = doc.data
    checks.check_format(doc)
    if d["kind"] == "layout":
        return F.layout_from_data(d)
    if d["kind"] == "element":
        fmt = F.element_from_data(d)
        if fmt.specials == "ieee" and fmt.mantissa_bits == 0:
            raise doc.error(("specials",), "an ieee format needs at least one mantissa bit for NaN")
        if "per_word" in d.get("pack", {}):
            raise doc.error(("pack",), "element formats pack as {codes, words, word, order}")
        pk = fmt.pack
        if pk is not None:
            if pk.codes * pk.width != pk.total:
                raise doc.error(("pack",), f"{pk.codes} codes of {pk.width} bits do not fill {pk.words} {pk.word} "
                                           f"word(s) ({pk.total} bits) exactly")
            if pk.width > pk.word_bits:
                # kernels read a code from the word of its lowest bit and the next one: two words at most
                raise doc.error(("pack",), f"codes of {pk.width} bits are wider than a {pk.word} word")
            if (pk.words * F.INT_DTYPES[pk.word]) % F.ITEMSIZE.get(fmt.torch_dtype, 1):
                raise doc.error(("container",), "a packet must hold a whole number of container elements")
            if fmt.native:
                raise doc.error(("native",), "a packed format is stored through its software codec only")
        if fmt.rounding == "truncate_carry" and fmt.exponent_bits == 8:
            raise doc.error(("rounding",), "truncate_carry needs fewer than 8 exponent bits")
        return fmt
    if "codes" in d.get("pack", {}):
        raise doc.error(("pack",), "scale formats pack as {per_word, bits, word}")
    if d["store"] == "exponent_byte" and d["value"] != "pow2_ceil":
        raise doc.error(("store",), "exponent_byte storage needs value: pow2_ceil")
    if (d["value"] == "ratio_rounded") != (d["store"] == "element") or (d["store"] == "element") != ("element" in d):
        raise doc.error(("value",), "a scale rounded to an element format is value: ratio_rounded, store: element, "
                                    "element: <format>, all three")
    if d["store"] == "element" and "pack" in d:
        raise doc.error(("pack",), "a scale stored as an element format's code is not packed")
    return F.scale_from_data(d)


def link_scales(scales: dict, elements: dict, documents: dict) -> dict:
    """Scale formats with their rules resolved: one rounded to an element format names an element format
    that exists, is not packed and has a smallest subnormal that is a float32 value."""
    out = {}
    for name, fmt in scales.items():
        if fmt.element is not None:
            # the file defining it (the last one: a file being validated comes after the catalog's)
            doc = ([d for d in documents.values() if d.kind == "format" and d.data.get("format") == name
                    and d.data.get("kind") == "scale"] or [None])[-1]
            el = elements.get(fmt.element)
            if el is None or el.pack is not None or el.emin - el.mantissa_bits < -149:
                why = "unknown element format" if el is None else "a packed or too wide element format"
                err = f"{why} {fmt.element!r}; expected one of {listing(sorted(elements))}"
                if doc is None:
                    raise ValueError(err)
                raise doc.error(("element",), err)
        out[name] = F.linked_scale(fmt, elements)
    return out


def build_arch(doc: Document) -> Arch:
    d = doc.data
    checks.check_arch(doc)
    cap = tuple(d["capability"]) if "capability" in d else None
    if d["backend"] == "cuda" and cap is None:
        raise doc.error(("capability",), "a cuda profile needs capability: [major, minor]")
    return Arch(d["arch"], d["doc"], d["backend"], cap, d["target"], d["tile_memory"], d["loops"], d["threads"],
                d.get("vector_bytes", 16), d.get("tile_elems", 4096), tuple(d["native_formats"]),
                dict(d.get("pass_configs", {})), tuple(d.get("compile_flags", [])), dict(d.get("tuned", {})),
                doc.path, d.get("pad_reduced", False), d.get("max_skips_nan", True),
                d.get("native_casts_saturate", False), d.get("persistent_blocks", 1), d.get("max_tile_bytes"),
                tuple(d["passes"]) if "passes" in d else None)


def build_op(doc: Document, elements, scales, arch_names, layouts=None, check_op=None) -> OpSpec:
    d = doc.data
    checks.check_declared_names(doc)
    taken = {}
    layouts = layouts or {}

    def claim(name, kind, path):
        if name in taken:
            raise doc.error(path, f"{name!r} is already a {taken[name]}; names must be unique in a spec")
        if name in RESERVED and kind != "dim":
            raise doc.error(path, f"{name!r} is reserved")
        taken[name] = kind

    params = {}
    for name, p in d.get("params", {}).items():
        claim(name, "param", ("params", name))
        choices = tuple(p["one_of"]) if "one_of" in p else None
        rng = tuple(_parse(doc, ("params", name, "range", i), v) for i, v in enumerate(p["range"])) if "range" in p else None
        default = p.get("default")
        if choices is not None and len({type(v) for v in choices}) > 1 and any(isinstance(v, bool) for v in choices):
            raise doc.error(("params", name, "one_of"), "a boolean param takes only true and false")
        if choices is not None and default is not None and default not in choices:
            raise doc.error(("params", name, "default"), f"default {short(default)} is not one of {listing(map(repr, choices))}")
        for key in ("optional", "absent"):
            if key in p and p.get("type") != "float":
                raise doc.error(("params", name, key), f"`{key}` is for float params (type: float)")
        if p.get("type") == "float" and p.get("optional"):
            # an optional float param: None by default, and its absence is a variant of its own in which
            # compute sees the constant `absent` (an infinite clamp folds away: no code for it)
            if default is not None or "absent" not in p:
                raise doc.error(("params", name), "an optional float param has no default and needs `absent:`, "
                                                  "its value in compute when it is None")
            if "test_values" not in p:
                raise doc.error(("params", name), "an optional float param needs `test_values` (drawn besides None)")
            tv = tuple(float(v) for v in p["test_values"])
            params[name] = Param(name, p["doc"], None, None, None, "float", tv, True, float(p["absent"]))
            continue
        if "absent" in p:
            raise doc.error(("params", name, "absent"), "`absent` is for optional float params (optional: true)")
        if p.get("type") == "float":
            if default is None:
                raise doc.error(("params", name), "a float param needs a default")
            tv = tuple(float(v) for v in p.get("test_values", [default]))
            params[name] = Param(name, p["doc"], None, None, float(default), "float", tv)
            continue
        params[name] = Param(name, p["doc"], choices, rng, default)
    for name, p in d.get("params", {}).items():
        if p.get("runtime"):
            if params[name].range is None or params[name].kind != "int":
                raise doc.error(("params", name, "runtime"), "`runtime` is for integer params with a `range` "
                                                             "(a value the kernel takes as an argument)")
            params[name] = dataclasses.replace(params[name], runtime=True)
        if p.get("appended"):
            if params[name].default is None and not params[name].optional:
                raise doc.error(("params", name, "appended"), "an appended param needs a default (an argument added "
                                                              "to a released op comes after the others, with a default)")
            params[name] = dataclasses.replace(params[name], appended=True)
    dims = {}
    for name, dd in d["dims"].items():
        claim(name, "dim", ("dims", name))
    for name, dd in d["dims"].items():
        req = []
        for i, text in enumerate(dd.get("require", [])):
            node = _parse(doc, ("dims", name, "require", i), text)
            _check_names(doc, ("dims", name, "require", i), node, set(d["dims"]) | set(params), "a requirement")
            _no_runtime_param(doc, ("dims", name, "require", i), node, params, "a requirement")
            req.append((text, node))
        dims[name] = Dim(name, dd["doc"], dd.get("dynamic", False), dd.get("min", 0), dd.get("max"), tuple(req),
                         tuple(dd.get("test_values", ())))
    known_sizes = set(dims) | set(params)
    # the names a size may use: dims and integer params (a string or float param is no size)
    sizes = set(dims) | {n for n, p in params.items() if p.kind != "float" and not p.structural}
    for pname, p in params.items():
        # a one_of may name a dim (group: [32, H]); a range may use dims and params
        if p.range:
            for i, node in enumerate(p.range):
                _check_names(doc, ("params", pname, "range", i), node, known_sizes, "a range", sizes)
    axes = {}
    for name, text in d["axes"].items():
        claim(name, "axis", ("axes", name))
        node = _parse(doc, ("axes", name), text)
        _check_names(doc, ("axes", name), node, known_sizes, "an axis extent", sizes)
        _no_runtime_param(doc, ("axes", name), node, params, "an axis extent")
        axes[name] = Axis(name, node, str(text))
    first = next(iter(axes.values()))
    dyn = _row_dim(doc, dims, first, axes)
    row_inner = _row_inner(doc, dyn[0], first, axes) if dyn else None

    def tensor(role, name, t):
        base = (role + "s", name)
        claim(name, role, base)
        shape, view, segments = layout(base, t)
        if segments is not None and (role != "input" or set(t) & {"format", "scale_format", "at"}):
            raise doc.error(base + ("view", segments[0]), "segments split the dim of an input of plain dtype "
                                                          "(dtype, dtypes or like)")
        for i, s in enumerate(shape):
            extra = [n for n in E.names(s) if n in dims and dims[n].dynamic and n != dyn[0]]
            if extra and "at" not in t:
                raise doc.error(base + ("shape", i), f"{extra[0]!r} is a runtime size besides the rows: it can only "
                                                     "size a tensor addressed `at:` positions")
        when = []
        # `when:` names the condition an output depends on: an optional input (written only when it is
        # given), a boolean param (written only when it is true) or, as a mapping, boolean params (the
        # layout it takes when the param is true)
        optional_when = t.get("when") if isinstance(t.get("when"), str) else None
        for param, alt in (t.get("when") if isinstance(t.get("when"), dict) else {}).items():
            path = base + ("when", param)
            if role != "output" and set(t) & {"at", "format", "scale_format"}:
                raise doc.error(path, "an input that changes layout with a param has a plain dtype and a view")
            if param not in params or not params[param].boolean:
                raise doc.error(path, f"{param!r} is not a boolean param (one_of: [false, true])")
            ashape, aview, asegments = layout(path, alt)
            if role != "output" and (tuple(str(x) for x in alt["shape"]) != tuple(str(x) for x in t["shape"])
                                     or segments is not None or asegments is not None):
                raise doc.error(path, "an input's layout keeps its shape (the view alone changes) and has no segments")
            if sorted(a for g in aview for a in g) != sorted(a for g in view for a in g):
                raise doc.error(path + ("view",), "the layout must use the same axes as the tensor's view")
            when.append((param, ashape, tuple(str(x) for x in alt["shape"]), aview))
        dtypes = tuple(t["dtypes"]) if "dtypes" in t else ((t["dtype"],) if "dtype" in t else ())
        like = t.get("like")
        if like is not None and (like not in d["inputs"] or like == name):
            raise doc.error(base + ("like",), f"`like` names another input ({listing(d['inputs'])})")
        for i, dt in enumerate(dtypes):
            if dt not in elements and dt not in BUILTIN_DTYPES:
                raise doc.error(base + ("dtypes" if "dtypes" in t else "dtype",),
                                f"unknown dtype {short(dt)}; expected an element format ({listing(sorted(elements))}) "
                                f"or one of {listing(BUILTIN_DTYPES)}")
        if role == "output" and len(dtypes) > 1:
            raise doc.error(base + ("dtypes",), "an output has one dtype (or a format)")
        for key, table, kind in (("format", elements, "element"), ("scale_format", scales, "scale")):
            ref = t.get(key)
            if ref is None:
                continue
            names_ = params[ref].choices if ref in params else (ref,)
            for n in names_:
                if n not in table:
                    raise doc.error(base + (key,), f"unknown {kind} format {short(n)}; expected one of {listing(sorted(table))}")
        exact = t.get("exact", "bit" if role == "output" else None)
        if t.get("strided") and (role != "input" or set(t) & {"at", "format", "scale_format"} or segments):
            raise doc.error(base + ("strided",), "`strided` is for inputs of a plain dtype with a view (no `at`, "
                                                 "format or segments)")
        for key in ("optional", "absent") if role == "output" else ("when", "into"):
            if key == "when" and isinstance(t.get(key), dict):
                continue                  # an input's layout chosen by a boolean param
            if key in t:
                raise doc.error(base + (key,), f"`{key}` is for {'inputs' if role == 'output' else 'outputs'} only")
        if "with" in t and (role != "input" or not t.get("optional") or "at" in t or t["with"] == name
                            or t["with"] not in list(d["inputs"])[:list(d["inputs"]).index(name)]
                            or not d["inputs"][t["with"]].get("optional")):
            raise doc.error(base + ("with",), "`with` names an optional input declared before this one, given "
                                              "together with it (this input optional too, not `at:` positions)")
        if t.get("appended") and (role != "input" or not t.get("optional")):
            raise doc.error(base + ("appended",), "`appended` is for optional inputs (an argument added to a released "
                                                  "op comes after the others, with a default)")
        if "returned_with" in t and (role != "output" or t["returned_with"] not in d["inputs"]
                                     or not d["inputs"][t["returned_with"]].get("optional") or "into" in t):
            raise doc.error(base + ("returned_with",), "`returned_with` names an optional input: the output, added to "
                                                       "a released op, is returned only when that input is given")
        if t.get("optional") and "absent" not in t:
            raise doc.error(base + ("optional",), "an optional input needs `absent:`, the value `load` gives without it")
        if t.get("values", {}).get("distinct") and "range" not in t["values"]:
            raise doc.error(base + ("values", "distinct"), "`distinct` draws distinct values from a `range`")
        if "max_abs" in t.get("values", {}):
            too_big = {"max", "huge", "inf", "nan"} & set(t["values"].get("specials", ()))
            if role != "input" or any(dt in BUILTIN_DTYPES for dt in dtypes):
                raise doc.error(base + ("values", "max_abs"), "`max_abs` bounds the values of a float input")
            if too_big:
                raise doc.error(base + ("values", "max_abs"), f"`max_abs` bounds every drawn value: the specials "
                                                              f"{sorted(too_big)} exceed it")
        rng = t.get("values", {}).get("range")
        if rng is not None:
            if role != "input" or not dtypes or any(dt not in BUILTIN_DTYPES for dt in dtypes):
                raise doc.error(base + ("values", "range"), "`range` draws the values of an integer input")
            for i, r in enumerate(rng):
                _check_names(doc, base + ("values", "range", i), _parse(doc, base + ("values", "range", i), str(r)),
                             set(dims) | {n for n, p in params.items() if p.range is not None},
                             "a range of values")
        if "at" in t and (t["at"] not in d["inputs"] or t["at"] == name):
            raise doc.error(base + ("at",), f"`at` names an integer input holding positions; inputs are {listing(d['inputs'])}")
        if "at" in t and not set(t) & {"dtype", "dtypes"} and not ("view" in t and "like" in t):
            raise doc.error(base + ("at",), "a tensor addressed `at:` positions has a plain dtype (no format or "
                                            "layout; `like` for one addressed by rows)")
        if "at" in t and "view" in t and (len(shape) < 2 or not set(E.names(shape[0])) & set(dyn[1:])):
            raise doc.error(base + ("shape", 0), "rows at positions: the first dim is a runtime size besides the rows "
                                                 "(a dynamic dim), the others are indexed by the view")
        if "fill" in t and (role != "output" or "at" not in t or "view" in t or
                            set(dtypes) - {"int32", "int64"} or len(dtypes) != 1):
            raise doc.error(base + ("fill",), "`fill` is for an output of an integer dtype added at flat positions "
                                              "(`at:` without a view)")
        if "layout" in t:
            ref = t["layout"]
            for n in (params[ref].choices if ref in params else (ref,)):
                if n not in layouts:
                    raise doc.error(base + ("layout",), f"unknown layout {short(n)}; expected one of {listing(sorted(layouts))}")
            if role != "output" or len(shape) != 2:
                raise doc.error(base + ("layout",), "a layout applies to 2-D outputs")
        return Tensor(name, role, t.get("doc", ""), dtypes, t.get("format"), t.get("scale_format"), t.get("layout"), shape,
                      tuple(str(s) for s in t["shape"]), view, exact, dict(t.get("values", {})), tuple(when),
                      bool(t.get("optional", False)), t.get("absent"), like, optional_when, t.get("at"), segments,
                      into=t.get("into"), padding=t.get("padding"), fill=t.get("fill"),
                      strided=bool(t.get("strided", False)), together=t.get("with"),
                      appended=bool(t.get("appended", False)), returned_with=t.get("returned_with"))

    def layout(base, t):
        shape = tuple(_parse(doc, base + ("shape", i), s) for i, s in enumerate(t["shape"]))
        for i, s in enumerate(shape):
            _check_names(doc, base + ("shape", i), s, known_sizes, "a shape", sizes)
            _no_runtime_param(doc, base + ("shape", i), s, params, "a shape")
        if "at" in t and "view" not in t:
            return shape, (), None   # the view of its positions (set once every input is known)
        view, segments = [], None
        for i, v in enumerate(t["view"]):
            if not isinstance(v, dict):
                view.append((v,) if isinstance(v, str) else tuple(v))
                continue
            if segments is not None:
                raise doc.error(base + ("view", i), "one dim of a tensor may be split into segments")
            parts = []
            for name, group in v.items():
                fail_name = safety.name_problem(name)
                if fail_name:
                    raise doc.key_error(base + ("view", i, name), fail_name)
                parts.append((name, (group,) if isinstance(group, str) else tuple(group)))
            segments = (i, tuple(parts))
            view.append(tuple(dict.fromkeys(a for _, g in parts for a in g)))
        view = tuple(view)
        rows_at = int("at" in t)          # rows at positions: the view names the dims after the first
        if len(view) != len(shape) - rows_at:
            raise doc.error(base + ("view",), f"expected {len(shape) - rows_at} entries (one per dim of the shape"
                                              f"{' after the first, whose index is a position' if rows_at else ''}),"
                                              f" found {len(view)}")
        for i, group in enumerate(view):
            for a in group:
                if a not in axes:
                    raise doc.error(base + ("view", i), f"unknown axis {short(a)}{safety.did_you_mean(a, axes)} "
                                                           f"(axes are {listing(axes)})")
        flat = [a for g in view for a in g]
        if len(set(flat)) != len(flat):
            raise doc.error(base + ("view",), "an axis may index only one place of a tensor")
        if segments is not None and set(view[segments[0]]) & {first.name, row_inner}:
            raise doc.error(base + ("view", segments[0]), "segments split a dim other than the rows")
        if row_inner:
            _check_row_groups(doc, base, view, shape, first.name, row_inner, dyn[0])
        return shape, view, segments

    inputs = {n: tensor("input", n, t) for n, t in d["inputs"].items()}
    outputs = {n: tensor("output", n, t) for n, t in d["outputs"].items()}
    inputs, outputs = _resolve_at(doc, inputs, outputs)
    _check_into(doc, inputs, outputs)
    _check_padding(doc, inputs, outputs)
    inputs = _resolve_like(inputs)
    for n, t in inputs.items():
        if t.like:
            if t.like not in inputs or inputs[t.like].like or not inputs[t.like].dtypes or t.dtypes:
                raise doc.error(("inputs", n, "like"), "`like` (instead of a dtype) names another input with dtypes")
            inputs[n] = Tensor(**{**t.__dict__, "dtypes": inputs[t.like].dtypes})
    for n, t in outputs.items():
        if t.like and (t.like not in inputs or not inputs[t.like].dtypes):
            raise doc.error(("outputs", n, "like"), f"`like` names an input with a dtype; expected one of {listing(inputs)}")
        if t.like:
            outputs[n] = t = Tensor(**{**t.__dict__, "dtypes": inputs[t.like].dtypes})
        if t.when and not ((t.when in inputs and inputs[t.when].optional) or
                           (t.when in params and (params[t.when].boolean or params[t.when].optional))):
            raise doc.error(("outputs", n, "when"), f"`when` names an optional input, an optional param or a boolean "
                                                    f"param; optional inputs are {[i for i in inputs if inputs[i].optional]}, "
                                                    f"params {[p for p in params if params[p].boolean or params[p].optional]}")
        if isinstance(t.exact, dict) and "given" in t.exact:
            for g in t.exact["given"]:
                if g == n or d["outputs"].get(g, {}).get("dtype") != "fp32":
                    raise doc.error(("outputs", n, "exact", "given"),
                                    f"{g!r}: `given` names another output of dtype fp32 (fed back to the reference exactly)")
    stages = []
    for i, text in enumerate(d["compute"]):
        try:
            st = E.parse_statement(text)
        except E.ExprError as e:
            raise doc.error(("compute", i), e.message, col_offset=e.col) from None
        stages.append(Stage(i, st.targets, st.value, text))
    schedule = d.get("schedule", {})
    for key in schedule:
        if key != "default" and key not in arch_names:
            raise doc.key_error(("schedule", key), f"unknown architecture {short(key)}; expected default or one of "
                                                   f"{listing(sorted(arch_names))}")
    spec = OpSpec(d["op"], d["family"], d["doc"], doc.path, doc.sha256, params, dims, axes, inputs, outputs,
                  tuple(stages), schedule, tuple(d.get("workloads", ())), dict(d.get("tests", {})), doc, row_inner,
                  d.get("backward"))
    checks.check_op(doc, spec)
    if check_op is not None:
        check_op(spec, elements, scales, layouts)
    return spec


def load_catalog(root, check_op=None, lenient=False) -> Catalog:
    """Read and check every spec file under `root` (formats and archs first, then operators). `check_op`
    (spec, elements, scales, layouts), when given, runs on each operator once it is built (the driver
    passes the check that its stages mean something and every variant lowers).

    `lenient`: operator files that fail to read or build are left out, so that checking one file against
    the others never reports another file's error (the formats and archs, which every operator needs, must
    still be valid)."""
    root = Path(root)
    docs = {}
    for p in sorted(root.rglob("*.yaml")):
        try:
            docs[p] = read(p)
        except SpecError:
            if not lenient:
                raise
    elements, scales, archs, layouts = {}, {}, {}, {}
    for path, doc in docs.items():
        if doc.kind == "format":
            fmt = build_format(doc)
            table = (elements if isinstance(fmt, F.ElementFormat) else layouts if isinstance(fmt, F.Layout)
                     else scales)
            if fmt.name in table:
                raise doc.error(("format",), f"format {fmt.name!r} is defined twice")
            table[fmt.name] = fmt
        elif doc.kind == "arch":
            arch = build_arch(doc)
            if arch.name in archs:
                raise doc.error(("arch",), f"architecture {arch.name!r} is defined twice")
            archs[arch.name] = arch
    scales = link_scales(scales, elements, docs)
    ops = {}
    for path, doc in docs.items():
        if doc.kind == "op":
            try:
                spec = build_op(doc, elements, scales, set(archs), layouts, check_op)
            except SpecError:
                if not lenient:
                    raise
                continue
            if spec.name in ops:
                raise doc.error(("op",), f"operator {spec.name!r} is defined twice")
            ops[spec.name] = spec
    catalog = Catalog(root, ops, elements, scales, archs, docs, layouts)
    checks.check_profiles(catalog)
    from .autograd import plan
    for spec in list(ops.values()):
        try:
            plan(catalog, spec)
        except SpecError:
            if not lenient:
                raise
            del ops[spec.name]
    return catalog
