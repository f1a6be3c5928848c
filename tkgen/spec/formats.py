"""Number formats as data: element formats (ExMy) and scale formats, and the codecs built from them.

A format file says how many exponent and mantissa bits a format has, its bias, which codes are special,
how it rounds and what happens on overflow. From those numbers alone this module builds the software
encoder (float32 -> integer code) and decoder (code -> float32) as primitive IR; the emitters print them
for TileLang and for PyTorch. Nothing here knows a format by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..ir import prim as ir
from ..ir.prim import F32, I32, U32, Builder, Function, Var, c, op, u32
from ..runtime.packing import INT_DTYPES, Packet

# bytes per element of every dtype name a tensor may be held in (the generator runs without torch)
ITEMSIZE = {**INT_DTYPES, "fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "e4m3": 1, "float8_e4m3fn": 1,
            "float8_e5m2": 1, "float16": 2}
ROUNDINGS = ("nearest_even", "truncate_carry")


@dataclass(frozen=True)
class Packing(Packet):
    """A packet's geometry (tkgen/runtime/packing.py) and its packing and unpacking as primitive IR."""

    @staticmethod
    def _assemble_ir(pieces, parts) -> ir.Expr:
        out = None
        for i, r, n, sh in pieces:
            t = op("shl", op("bitand", op("shr", parts[i], u32(r)), u32((1 << n) - 1)), u32(sh))
            out = t if out is None else op("bitor", out, t)
        return out

    def pack_ir(self, k, codes) -> ir.Expr:
        """Word k (u32) from the packet's codes (u32 IR expressions)."""
        return self._assemble_ir(self.word_pieces(k), codes)

    def unpack_ir(self, j, words) -> ir.Expr:
        """Code j (u32) from the packet's words (u32 IR expressions)."""
        return self._assemble_ir(self.code_pieces(j), words)


@dataclass(frozen=True)
class ElementFormat:
    name: str
    doc: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: str          # ieee | finite_nan | finite
    overflow: str          # saturate | inf
    torch_dtype: str       # the container torch dtype
    storage: str           # the integer dtype that carries codes where the target has no native type
    native: dict           # backend -> TileLang dtype with a conversion that matches this format's rules
    rounding: str = "nearest_even"
    pack: Optional[Packing] = None       # sub-word codes packed into words
    min_amax: Optional[float] = None     # the amax floor of a cast into this format (a float32)

    @property
    def codes_per_packet(self) -> int:
        return self.pack.codes if self.pack else 1

    def container_ratio(self):
        """(num, den): a last dim of L logical elements is L * num / den container elements."""
        if not self.pack:
            return 1, 1
        import math
        num = self.pack.words * INT_DTYPES[self.pack.word]
        den = self.pack.codes * ITEMSIZE.get(self.torch_dtype, 1)
        g = math.gcd(num, den)
        return num // g, den // g

    @property
    def width(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max_code(self) -> int:
        """The largest finite magnitude code (sign bit clear)."""
        e, m = self.exponent_bits, self.mantissa_bits
        if self.specials == "ieee":
            return ((2 ** e - 2) << m) | (2 ** m - 1)
        if self.specials == "finite_nan":
            return ((2 ** e - 1) << m) | (2 ** m - 2)
        return ((2 ** e - 1) << m) | (2 ** m - 1)

    @property
    def max_value(self) -> float:
        return decode_code_python(self, self.max_code)

    @property
    def nan_code(self) -> Optional[int]:
        e, m = self.exponent_bits, self.mantissa_bits
        if self.specials == "ieee":
            return ((2 ** e - 1) << m) | (1 << (m - 1)) if m else None
        if self.specials == "finite_nan":
            return (2 ** (e + m)) - 1
        return None

    @property
    def inf_code(self) -> Optional[int]:
        return ((2 ** self.exponent_bits - 1) << self.mantissa_bits) if self.specials == "ieee" else None

    @property
    def is_float32(self) -> bool:
        return self.exponent_bits == 8 and self.mantissa_bits == 23

    def native_on(self, backend: str) -> Optional[str]:
        return self.native.get(backend)


@dataclass(frozen=True)
class RoundedRatio:
    """The rule of a scale rounded to an element format (`value: ratio_rounded`), TileKernels' E4M3
    scales: the amax floored at max * (the element's smallest subnormal), so that sf never rounds to 0;
    sf = element(a / max), to nearest even by the element's rules (saturating for e4m3); inv = 1 / sf."""

    element: ElementFormat

    def __str__(self) -> str:
        return "ratio_rounded"


@dataclass(frozen=True)
class ScaleFormat:
    name: str
    doc: str
    value: object              # ratio | pow2_ceil, or a RoundedRatio (its element linked by the catalog)
    store: str                 # float | exponent_byte | element (the element format's code)
    pack: Optional[dict]       # {per_word, bits, word} or None
    element: Optional[str] = None    # ratio_rounded: the element format's name

    @property
    def element_format(self) -> Optional[ElementFormat]:
        """The element format the scale is stored in (store: element), once linked."""
        return self.value.element if isinstance(self.value, RoundedRatio) else None

    @property
    def per_word(self) -> int:
        return self.pack["per_word"] if self.pack else 1

    @property
    def packing(self) -> Optional[Packing]:
        """The word packing of the stored bytes, in the terms element formats use (lsb first, one word)."""
        if not self.pack:
            return None
        return Packing(self.pack["per_word"], self.pack["bits"], 1, self.pack["word"], "lsb_first")

    @property
    def torch_dtype(self) -> str:
        if self.pack:
            return self.pack["word"]
        if self.store == "element":
            return self.element_format.torch_dtype
        return "float32" if self.store == "float" else "uint8"



@dataclass(frozen=True)
class Layout:
    """How a 2-D [rows, cols] tensor is stored. col_major: as its transpose [cols, rows], each stored line
    (a column) padded to `align_bytes` (TMA wants 16-byte aligned columns); the caller sees the [rows,
    cols] view with strides (1, padded rows). Padding is never written."""

    name: str
    doc: str
    order: str
    align_bytes: int = 1

    def pad_elems(self, elem_bytes: int) -> int:
        return max(1, self.align_bytes // elem_bytes)


def layout_from_data(d: dict) -> Layout:
    return Layout(d["format"], d["doc"], d["order"], d.get("align_bytes", 1))


def element_from_data(d: dict) -> ElementFormat:
    cont = d["container"]
    width = 1 + d["exponent_bits"] + d["mantissa_bits"]
    pk = d.get("pack")
    pack = Packing(pk["codes"], width, pk["words"], pk["word"], pk.get("order", "lsb_first")) if pk else None
    floor = d.get("min_amax")
    if floor is not None:
        floor = float32(floor)     # the float32 the kernels use
    return ElementFormat(d["format"], d["doc"], d["exponent_bits"], d["mantissa_bits"], d["bias"], d["specials"],
                         d["overflow"], cont["torch"], cont.get("storage", cont["torch"]), dict(d.get("native", {})),
                         d.get("rounding", "nearest_even"), pack, floor)


def scale_from_data(d: dict) -> ScaleFormat:
    return ScaleFormat(d["format"], d["doc"], d["value"], d["store"], d.get("pack"), d.get("element"))


def linked_scale(fmt: ScaleFormat, elements: dict) -> ScaleFormat:
    """A scale format with its rule resolved against the element formats (ratio_rounded names one)."""
    if fmt.element is None:
        return fmt
    import dataclasses
    return dataclasses.replace(fmt, value=RoundedRatio(elements[fmt.element]))


def float32(v: float) -> float:
    """The float32 nearest to v, as a Python float."""
    import struct
    return struct.unpack("f", struct.pack("f", float(v)))[0]


def decode_code_python(fmt: ElementFormat, code: int) -> float:
    """Plain-Python decode of one code, used for constants (the format's max) and by tests."""
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    sign = -1.0 if (code >> (e + m)) & 1 else 1.0
    mag = code & ((1 << (e + m)) - 1)
    ef, mf = mag >> m, mag & ((1 << m) - 1)
    if fmt.specials == "ieee" and ef == 2 ** e - 1:
        return sign * float("inf") if mf == 0 else float("nan")
    if fmt.specials == "finite_nan" and mag == (1 << (e + m)) - 1:
        return float("nan")
    if ef == 0:
        return sign * mf * 2.0 ** (fmt.emin - m)
    return sign * (1 + mf / 2 ** m) * 2.0 ** (ef - fmt.bias)


def _encoder_prologue(fmt: ElementFormat):
    """(builder, the float32 argument, its magnitude bits `a`, its sign moved to the format's sign bit)."""
    b = Builder()
    x = Var("x", F32)
    u = b.let("u", op("bits", x))
    a = b.let("a", op("bitand", u, u32(0x7FFFFFFF)))
    sign = b.let("sign", op("shl", op("shr", u, u32(31)), u32(fmt.exponent_bits + fmt.mantissa_bits)))
    return b, x, a, sign


def encoder(fmt: ElementFormat) -> Function:
    """float32 -> code (u32 holding `fmt.width` bits), by the format's rounding and overflow rules."""
    if fmt.rounding == "truncate_carry":
        return _encoder_truncate_carry(fmt)
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    b, x, a, sign = _encoder_prologue(fmt)
    shift = 23 - m
    is_nan = op("gt", a, u32(0x7F800000))
    nan_code = fmt.nan_code if fmt.nan_code is not None else fmt.max_code
    if e == 8:
        # Same exponent range as float32: dropping mantissa bits with RNE covers subnormals, and a carry
        # out of the largest finite value lands on infinity, as IEEE requires.
        lsb = op("bitand", op("shr", a, u32(shift)), u32(1))
        mag = op("shr", op("add", op("add", a, u32((1 << (shift - 1)) - 1)), lsb), u32(shift))
        if fmt.overflow == "saturate":
            mag = op("min", mag, u32(fmt.max_code))
        code = op("select", is_nan, u32(nan_code), mag)
        return Function(f"encode_{fmt.name}", (x,), tuple(b.lets), op("bitor", code, sign),
                        f"float32 -> {fmt.name} code, round to nearest even", macro=True)
    e32 = b.let("e32", op("shr", a, u32(23)))
    # normal results: rebias the exponent, then round the mantissa to m bits (nearest, ties to even)
    lsb = op("bitand", op("shr", a, u32(shift)), u32(1))
    rebias = (127 - fmt.bias) << 23
    nrm = op("shr", op("add", op("add", op("sub", a, u32(rebias)), u32((1 << (shift - 1)) - 1)), lsb), u32(shift))
    top = fmt.max_code if fmt.overflow == "saturate" else fmt.inf_code
    nrm = b.let("nrm", op("min", nrm, u32(top)))
    # subnormal results: |x| / 2^(emin - m), rounded to nearest even; the shift stays in [24 - m, 24]
    lo, hi = 126 + fmt.emin - m, 126 + fmt.emin
    m24 = op("bitor", op("bitand", a, u32(0x7FFFFF)), u32(0x800000))
    sh = b.let("sh", op("sub", u32(150 + fmt.emin - m), op("min", op("max", e32, u32(lo)), u32(hi))))
    q = b.let("q", op("shr", m24, sh))
    rem = b.let("rem", op("bitand", m24, op("sub", op("shl", u32(1), sh), u32(1))))
    half = b.let("half", op("shl", u32(1), op("sub", sh, u32(1))))
    up = op("or", op("gt", rem, half), op("and", op("eq", rem, half), op("eq", op("bitand", q, u32(1)), u32(1))))
    sub = b.let("sub", op("add", q, op("select", up, u32(1), u32(0))))
    code = op("select", is_nan, u32(nan_code),
              op("select", op("ge", a, u32((127 + fmt.emin) << 23)), nrm,
                 op("select", op("ge", e32, u32(lo)), sub, u32(0))))
    return Function(f"encode_{fmt.name}", (x,), tuple(b.lets), op("bitor", code, sign),
                    f"float32 -> {fmt.name} code: round to nearest even, {fmt.overflow} on overflow", macro=True)


def _encoder_truncate_carry(fmt: ElementFormat) -> Function:
    """Truncate toward zero to the format, then carry by the float32 bits below the kept mantissa bits.

    1. |x| is truncated toward zero to the format (subnormals included); finite values beyond the largest
       finite magnitude become it, as IEEE round-toward-zero does; ±inf stays infinite (or saturates in
       a format without infinities); NaN becomes the NaN code.
    2. The code is incremented when `(code & 1) + (bits(x) & (2^(23-m) - 1)) > 2^(22-m)`: the float32
       mantissa bits below the format's m bits, against half an ulp of a normal number. For normal
       results this is round-to-nearest-even. For subnormal results (and values below the smallest
       subnormal) those float32 bits are not the bits that were dropped, so the carry is not a rounding
       of the value. This is TileKernels' E5M6 rule (round to fp16 toward zero, keep the top 12 bits,
       then the same carry), which it applies to every magnitude.
    """
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    b, x, a, sign = _encoder_prologue(fmt)
    shift = 23 - m
    e32 = b.let("e32", op("shr", a, u32(23)))
    nrm = op("min", op("shr", op("sub", a, u32((127 - fmt.bias) << 23)), u32(shift)), u32(fmt.max_code))
    lo, hi = 126 + fmt.emin - m, 126 + fmt.emin
    m24 = op("bitor", op("bitand", a, u32(0x7FFFFF)), u32(0x800000))
    sh = op("sub", u32(150 + fmt.emin - m), op("min", op("max", e32, u32(lo)), u32(hi)))
    trunc = b.let("trunc", op("select", op("ge", a, u32((127 + fmt.emin) << 23)), nrm,
                              op("select", op("ge", e32, u32(lo)), op("shr", m24, sh), u32(0))))
    rem = op("bitand", a, u32((1 << shift) - 1))
    carry = op("gt", op("add", op("bitand", trunc, u32(1)), rem), u32(1 << (shift - 1)))
    finite = b.let("finite", op("add", trunc, op("select", carry, u32(1), u32(0))))
    nan_code = fmt.nan_code if fmt.nan_code is not None else fmt.max_code
    inf_code = fmt.inf_code if fmt.inf_code is not None else fmt.max_code
    code = op("select", op("gt", a, u32(0x7F800000)), u32(nan_code),
              op("select", op("eq", a, u32(0x7F800000)), u32(inf_code), finite))
    return Function(f"encode_{fmt.name}", (x,), tuple(b.lets), op("bitor", code, sign),
                    f"float32 -> {fmt.name} code: truncate toward zero, then carry by the float32 bits", macro=True)


def decoder(fmt: ElementFormat) -> Function:
    """code (u32) -> float32, exact."""
    e, m = fmt.exponent_bits, fmt.mantissa_bits
    b = Builder()
    code = Var("code", U32)
    if e == 8:
        return Function(f"decode_{fmt.name}", (code,), (), op("from_bits", op("shl", code, u32(23 - m))),
                        f"{fmt.name} code -> float32 (the code is the top bits of a float32)")
    sign = b.let("sign", op("shl", op("bitand", op("shr", code, u32(e + m)), u32(1)), u32(31)))
    mag = b.let("mag", op("bitand", code, u32((1 << (e + m)) - 1)))
    ef = b.let("ef", op("shr", mag, u32(m)))
    mf = b.let("mf", op("bitand", mag, u32((1 << m) - 1)))
    normal = op("from_bits", op("bitor", sign, op("bitor", op("shl", op("add", ef, u32(127 - fmt.bias)), u32(23)),
                                                   op("shl", mf, u32(23 - m)))))
    subn = op("from_bits", op("bitor", sign, op("bits", op("mul", op("to_f32", mf), c(2.0 ** (fmt.emin - m))))))
    value = op("select", op("eq", ef, u32(0)), subn, normal)
    nan = op("from_bits", u32(0x7FC00000))
    if fmt.specials == "ieee":
        inf = op("from_bits", op("bitor", sign, u32(0x7F800000)))
        value = op("select", op("eq", ef, u32(2 ** e - 1)), op("select", op("eq", mf, u32(0)), inf, nan), value)
    elif fmt.specials == "finite_nan":
        value = op("select", op("eq", mag, u32((1 << (e + m)) - 1)), nan, value)
    return Function(f"decode_{fmt.name}", (code,), tuple(b.lets), value, f"{fmt.name} code -> float32, exact")


def rounder(fmt: ElementFormat) -> Function:
    """float32 -> float32 rounded through the format (its encoder, then its decoder). A macro, so that
    the code is bound once before the decoder reads it several times."""
    x = Var("x", F32)
    code = Var("code", U32)
    return Function(f"round_{fmt.name}", (x,), (("code", ir.Call(f"encode_{fmt.name}", (x,), U32)),),
                    ir.Call(f"decode_{fmt.name}", (code,), F32), f"float32 -> float32 representable in {fmt.name}",
                    macro=True)


def exponent_byte(sf: ir.Expr) -> ir.Expr:
    """The biased exponent of a power-of-two float32 (its UE8M0 byte), as u32."""
    return op("bitand", op("shr", op("bits", sf), u32(23)), u32(0xFF))


def exponent_field(x: ir.Expr) -> ir.Expr:
    """The biased exponent field of a float32 (bits 23..30, the sign ignored) as i32: e + 127 for a normal
    2^e, 0 for zero and subnormals, 255 for inf and NaN. For a power of two it is its UE8M0 byte."""
    return op("u32_to_i32", exponent_byte(x))


def pow2_of_int(n: ir.Expr) -> ir.Expr:
    """2^n as a float32 for an i32 n, exactly for every n: a normal number for n in [-126, 127], a
    subnormal for n in [-149, -127], 0 below, +inf above. Built from bits; every shift stays in [0, 31]."""
    i32 = lambda v: ir.Const(v, ir.I32)  # noqa: E731
    clamp = lambda v, lo, hi: op("min", op("max", v, i32(lo)), i32(hi))  # noqa: E731
    # biased exponent in [1, 255]: 255 (n >= 128) is the bit pattern of +inf
    normal = op("from_bits", op("shl", op("i32_to_u32", op("add", clamp(n, -126, 128), i32(127))), u32(23)))
    # 2^n = 2^-149 << (n + 149) for the subnormals
    subnormal = op("from_bits", op("shl", u32(1), op("i32_to_u32", op("add", clamp(n, -149, -127), i32(149)))))
    return op("select", op("ge", n, i32(-126)), normal,
              op("select", op("ge", n, i32(-149)), subnormal, c(0.0)))


def round_positive(fmt: ElementFormat, v: ir.Expr) -> ir.Expr:
    """v >= 0 (or NaN) rounded to the values of `fmt`, to nearest even by its overflow rule, as a float32:
    what decode(encode(v)) gives for such v, in float32 arithmetic and bit operations instead of the
    codec. (Nested in the encoder of a store, the codec pair made TVM's simplifier take minutes per C
    kernel.) Normal results round the float32 bits to the format's mantissa bits, saturating at the
    largest finite value or overflowing to inf; below 2^emin, v + C - C with C = 2^(emin - m + 23) rounds
    to a multiple of the smallest subnormal exactly (float32 addition rounds to nearest even, and C's ulp
    is that subnormal). NaN stays NaN, or becomes the largest value in a format without NaN."""
    if fmt.rounding != "nearest_even":
        raise ValueError(f"round_positive: {fmt.name} does not round to nearest even")
    m = fmt.mantissa_bits
    sh = 23 - m
    u = op("bits", v)
    r = op("bitand", op("add", op("add", u, u32((1 << (sh - 1)) - 1)), op("bitand", op("shr", u, u32(sh)), u32(1))),
           u32((0xFFFFFFFF >> sh) << sh))
    top = u32(ir.f32_bits(fmt.max_value))
    r = op("min", r, top) if fmt.overflow == "saturate" else op("select", op("gt", r, top), u32(0x7F800000), r)
    big = float32(2.0 ** (fmt.emin - m + 23))
    # the subtrahend as a bit pattern: the printers would take `(v + C) - C` for a cancellation (TVM's
    # simplifier folds it) and print an IEEE intrinsic that TileLang's C backend lacks
    sub = op("sub", op("add", v, c(big)), op("from_bits", u32(ir.f32_bits(big))))
    out = op("select", op("ge", v, c(2.0 ** fmt.emin)), op("from_bits", r), sub)
    if fmt.specials == "finite":          # no NaN: the codec gives the largest value, as for inf
        out = op("select", op("ne", v, v), c(fmt.max_value), out)
    return out


def stochastic_rounding(fmt: ElementFormat, v: ir.Expr, r: ir.Expr, name: str):
    """v (f32) rounded to the values of `fmt` by 16 random bits r (an i32 in [0, 2^16)), as PTX's
    cvt.rs.satfinite: r is added to the top 16 of the mantissa bits the format drops (23 - m bits below a
    normal result, more below the format's smallest normal), and the magnitude rounds away from zero on a
    carry out of them, else toward zero; results past the largest finite value and infinities give it, NaN
    stays NaN, the sign is kept. In i32 operations on the magnitude (never negative, so `>>` shifts in
    zeros). Returns (lets, result): the let-bound values named `<name>_<part>`, then the f32 result, which
    the format holds exactly."""
    m = fmt.mantissa_bits
    if 23 - m < 16:
        raise ValueError(f"stochastic rounding drops at least 16 bits: {fmt.name} keeps {m} mantissa bits")
    i = lambda x: ir.Const(x, I32)  # noqa: E731
    lo = fmt.emin + 127                          # the biased float32 exponent of the format's smallest normal
    b = Builder()
    u = b.let(f"{name}_bits", op("u32_to_i32", op("bits", v)))
    mag = b.let(f"{name}_mag", op("bitand", u, i(0x7FFFFFFF)))
    ex = b.let(f"{name}_ex", op("shr", mag, i(23)))
    sub = op("max", op("sub", i(lo), op("max", ex, i(1))), i(0))       # binades below the smallest normal
    sig = b.let(f"{name}_sig", op("bitor", op("bitand", mag, i(0x7FFFFF)),
                                 op("select", op("gt", ex, i(0)), i(0x800000), i(0))))
    below = lambda bits_: op("shr", sig, op("min", op("add", sub, i(bits_)), i(31)))  # noqa: E731
    kept = b.let(f"{name}_kept", op("add", below(23 - m),
                                    op("shr", op("add", op("bitand", below(7 - m), i(0xFFFF)), r), i(16))))
    step = pow2_of_int(op("sub", op("max", ex, i(lo)), i(127 + m)))
    mag_out = b.let(f"{name}_abs", op("min", op("mul", op("to_f32", kept), step), c(fmt.max_value)))
    out = op("select", op("isnan", v), v, op("select", op("lt", u, i(0)), op("neg", mag_out), mag_out))
    return b.lets, out


def scale_pair(rule, amax: ir.Expr, fmt_max: float):
    """(sf, inv) from a clamped amax: the dequantization scale and the quantization multiplier."""
    if isinstance(rule, RoundedRatio):
        el = rule.element
        floor = float32(fmt_max * 2.0 ** (el.emin - el.mantissa_bits))     # max times the smallest subnormal
        sf = round_positive(el, op("div", op("max", amax, c(floor)), c(fmt_max)))
        return sf, op("div", c(1.0), sf)
    if rule == "ratio":
        return op("div", amax, c(fmt_max)), op("div", c(fmt_max), amax)
    if rule == "pow2_ceil":
        # biased exponent of 2^ceil(log2(amax / max)): ((bits - 1) >> 23) + 1, exact for normal inputs
        be = op("add", op("shr", op("sub", op("bits", op("div", amax, c(fmt_max))), u32(1)), u32(23)), u32(1))
        return op("from_bits", op("shl", be, u32(23))), op("from_bits", op("shl", op("sub", u32(254), be), u32(23)))
    raise ValueError(f"unknown scale rule {rule!r}")
