"""One resolved signature per variant: every tensor's element type, container, packing, layout and shapes.

The kernel lowering, the reference, the op module, the strategies and the runtime all read this, so a
format or layout is resolved in exactly one place. A tensor's *element type* (`elem`) is one of:

- an element format name (`bf16`, `e4m3`, `e2m1`, ...): floats stored in that format (codes packed into
  words for formats with `pack`);
- `int32`, `int64`: integers;
- a scale format's stored element: `float32` (ratio and pow2 scales), `uint8` (UE8M0 bytes), or its
  packing word (`int32`: four UE8M0 bytes per word); a scale stored as an element format's codes (`e4m3`
  scales) is that element format;
- `@x`: whatever dtype input `x` has at the call (several `dtypes`, or `like: x`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from . import expr as E
from . import formats as F

INT_ELEMS = ("int32", "int64")
INT_STORAGE = ("int8", "uint8", "int16", "uint16", "int32", "int64")
TORCH_OF_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2",
                  "int32": "int32", "int64": "int64"}


@dataclass(frozen=True)
class TensorSig:
    name: str
    role: str                                  # input | output
    present: bool                              # given (inputs) or written (outputs) in this variant
    elem: str                                  # element type (see the module docstring)
    dtypes: Tuple[str, ...]                    # the dtypes the call may give (one for a fixed type)
    shape: Tuple[E.Node, ...]                  # logical shape
    shape_text: Tuple[str, ...]
    view: Tuple[Tuple[str, ...], ...]          # per logical dim, the axes that index it (major first)
    fmt: Optional[F.ElementFormat] = None      # `format:` tensors
    scale: Optional[F.ScaleFormat] = None      # `scale_format:` tensors
    packing: Optional[F.Packing] = None        # codes packed into words along the last dim
    col_pad: Optional[int] = None              # column-major layout: rows padded to this many elements
    at: Optional[str] = None                   # addressed at the positions this input holds (flat, or rows)
    row_view: Optional[Tuple[Tuple[str, ...], ...]] = None   # rows at positions: the view of dims 1..
    like: Optional[str] = None
    optional: bool = False
    segments: Optional[tuple] = None           # inputs: (dim, ((segment, axes), ...)), see model.Tensor
    padding: Optional[str] = None              # rows-at outputs: the input marking padding rows (< 0)
    fill: Optional[int] = None                 # flat at-outputs: the value elsewhere (elements stored, not added)
    strides_of: Optional[str] = None           # the strided input whose strides it has (itself, or the input
                                               # an output is written into)
    into: Optional[str] = None                 # outputs: the input whose storage it is written into

    @property
    def stored_at(self) -> bool:
        """At flat positions, each element stored (not added): over a fill, or into an input's storage."""
        return self.flat and (self.fill is not None or self.into is not None)

    @property
    def axes(self):
        return tuple(a for g in self.view for a in g)

    @property
    def flat(self) -> bool:
        """Addressed at flat positions (passed to kernels as one dim of `n_<name>` elements)."""
        return bool(self.at) and self.row_view is None

    @property
    def multi(self) -> bool:
        """Whether the element type is the dtype of an input at the call."""
        return self.elem.startswith("@")

    @property
    def container(self) -> Optional[str]:
        """The torch dtype of the container (None for `@x`: that input's dtype)."""
        if self.multi:
            return None
        if self.fmt is not None:
            return self.fmt.torch_dtype
        if self.scale is not None:
            return self.scale.torch_dtype
        return TORCH_OF_DTYPE.get(self.elem, self.elem)

    def packet(self) -> Tuple[int, int]:
        """(codes, container elements): `codes` logical elements of the last dim take that many container
        elements (1, 1 when not packed)."""
        if self.packing is None:
            return 1, 1
        if self.fmt is not None:
            num, den = self.fmt.container_ratio()
            return self.packing.codes, self.packing.codes * num // den
        return self.packing.codes, 1


def resolve(catalog, spec, t, variant) -> TensorSig:
    """The signature of tensor `t` (a model Tensor) in one variant."""
    t = t.resolved(variant)
    fmt = scale = pk = None
    pad = None
    if t.format_ref:
        fmt = catalog.resolve_format(spec, t.format_ref, variant, "element")
        elem, pk = fmt.name, fmt.pack
    elif t.scale_ref:
        scale = catalog.resolve_format(spec, t.scale_ref, variant, "scale")
        pk = scale.packing
        elem = pk.word if pk else scale.torch_dtype
        if scale.store == "element":
            # a scale held as an element format's codes is, to kernels and references, that format
            fmt, scale = scale.element_format, None
            elem = fmt.name
    elif t.like or len(t.dtypes) > 1:
        elem = "@" + (t.like or t.name)
    else:
        elem = t.dtypes[0]
    if t.layout_ref:
        lay = catalog.resolve_format(spec, t.layout_ref, variant, "layout")
        if lay.order == "col_major":
            pad = lay.pad_elems(F.ITEMSIZE[fmt.torch_dtype if fmt else scale.torch_dtype if scale
                                           else TORCH_OF_DTYPE[elem]])
    present = bool(variant.get(f"?{t.name}", True)) if t.role == "input" and t.optional else \
        (spec.writes(t, variant) if t.role == "output" else True)
    return TensorSig(t.name, t.role, present, elem, tuple(t.dtypes), t.shape, t.shape_text, t.view, fmt, scale,
                     pk, pad, t.at, t.row_view, t.like, t.optional, t.segments, t.padding,
                     t.fill,
                     t.name if t.strided else t.into if t.into and spec.inputs[t.into].strided else None,
                     t.into if t.role == "output" else None)


def signature(catalog, spec, variant) -> Dict[str, TensorSig]:
    """Every tensor of one variant, inputs first, by name."""
    return {n: resolve(catalog, spec, t, variant) for n, t in spec.tensors.items()}


def elem_dtypes(sig: TensorSig, sigs) -> Tuple[str, ...]:
    """The element types a tensor may have at the call: its own, or those of the input it follows."""
    if sig.multi:
        return sigs[sig.elem[1:]].dtypes
    return (sig.elem,)


def storage(catalog, arch, elem: str) -> str:
    """The TileLang dtype a tensor of element type `elem` is stored as on `arch`: the format's native type
    where the profile has it, else the integer storage its codes travel in."""
    if elem in catalog.elements:
        fmt = catalog.elements[elem]
        if fmt.pack:
            return fmt.pack.word
        native = fmt.native_on(arch.backend) if arch is not None else None
        return native if native and elem in arch.native_formats else fmt.storage
    return elem


def is_native(catalog, arch, elem: str) -> bool:
    """Whether `arch` converts element format `elem` natively (a cast) rather than by the software codec."""
    fmt = catalog.elements.get(elem)
    return fmt is not None and fmt.pack is None and fmt.native_on(arch.backend) is not None and \
        elem in arch.native_formats


def codec(sig: TensorSig) -> Optional[dict]:
    """How a tensor declared with a format is held in torch (see runtime.ops.InputInfo), else None."""
    if sig.fmt is not None:
        pk = sig.fmt.pack
        return dict(kind="element", name=sig.fmt.name, container=sig.fmt.torch_dtype, packet=sig.packet(),
                    pack=pk.key() if pk else None, store="codes")
    if sig.scale is not None:
        pk = sig.scale.packing
        return dict(kind="scale", name=sig.scale.name, container=sig.scale.torch_dtype, packet=sig.packet(),
                    pack=pk.key() if pk else None, store=sig.scale.store)
    return None
