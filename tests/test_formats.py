"""Generated codecs, checked exhaustively: against torch's own dtypes and ml_dtypes where they have the
format, and against an independent reference built on torch's fp16 conversion for E5M6."""
import ml_dtypes
import numpy as np
import pytest
import torch

from tkgen.spec import formats as F
from tkgen import registry

registry.use_generated()
from tkgen_generated.common import torch_helpers as H  # noqa: E402


def _all_codes(bits):
    return torch.arange(1 << bits, dtype=torch.int64)


def _u32(x):
    return x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _via_torch(dtype, fmax):
    """torch's own conversion, after the clamp the kernels apply (old torch did not saturate)."""
    def enc(x):
        return x.clamp(-fmax, fmax).to(dtype).view(torch.uint8).to(torch.int64)

    def dec(codes):
        return codes.to(torch.uint8).view(dtype).float()
    return enc, dec


def _via_ml_dtypes(dtype, bits):
    def enc(x):
        return torch.from_numpy(x.numpy().astype(dtype).view(np.uint8).astype(np.int64)) & ((1 << bits) - 1)

    def dec(codes):
        return torch.from_numpy(codes.numpy().astype(np.uint8).view(dtype).astype(np.float32))
    return enc, dec


def e5m6_reference(x):
    """TileKernels' E5M6 rule written the way it is stated: round to fp16 toward zero (here: torch's
    nearest-even fp16, stepped one ulp toward zero where it rounded away), keep the top 12 bits, then
    carry when (q & 1) + (the low 17 float32 bits) > 0x10000."""
    h = x.to(torch.float16)
    hb = h.view(torch.int16).to(torch.int64) & 0xFFFF
    hb = torch.where(h.float().abs() > x.abs(), hb - 1, hb)
    q = hb >> 4
    q = q + (((q & 1) + (_u32(x) & 0x1FFFF)) > 0x10000).to(torch.int64)
    return q & 0xFFF


def _e5m6_decode(codes):
    return (codes << 4).to(torch.int32).to(torch.int16).view(torch.float16).float()


ORACLES = {
    "e4m3": _via_torch(torch.float8_e4m3fn, 448.0),
    "e5m2": _via_torch(torch.float8_e5m2, 57344.0),
    "e2m1": _via_ml_dtypes(ml_dtypes.float4_e2m1fn, 4),
    "e5m6": (e5m6_reference, _e5m6_decode),
    # IEEE binary16: torch's conversion rounds to nearest even and overflows to inf, as the format declares
    "fp16": (lambda x: x.to(torch.float16).view(torch.int16).to(torch.int64) & 0xFFFF,
             lambda codes: codes.to(torch.int32).to(torch.int16).view(torch.float16).float()),
}


def _same_float(a, b):
    return (a.view(torch.int32) == b.view(torch.int32)) | (a.isnan() & b.isnan())


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_decode_every_code(catalog, name):
    fmt = catalog.element(name)
    codes = _all_codes(fmt.width)
    ours = getattr(H, f"decode_{name}")(codes)
    theirs = ORACLES[name][1](codes)
    assert bool(_same_float(ours, theirs).all())
    py = torch.tensor([F.decode_code_python(fmt, int(c)) for c in codes], dtype=torch.float32)
    assert bool(_same_float(ours, py).all())


def _patterns(fmt):
    """Every bf16-representable float32 (all exponents, both signs, NaNs, infinities); 2^20 random float32
    patterns; for every pair of adjacent values of the format, the exact midpoint and its two float32
    neighbours; the overflow edges (max, the midpoint above it and its neighbours, FLT_MAX, inf); and the
    smallest subnormal, half of it, and their neighbours. Both signs."""
    bf = torch.arange(1 << 16, dtype=torch.int64) << 16
    rnd = torch.randint(0, 1 << 32, (1 << 20,), generator=torch.Generator().manual_seed(7), dtype=torch.int64)
    vals = torch.tensor([F.decode_code_python(fmt, c) for c in range(1 << (fmt.width - 1))], dtype=torch.float64)
    vals = vals[torch.isfinite(vals)].unique()
    ulp_top = vals[-1] - vals[-2]
    mids = torch.cat([(vals[1:] + vals[:-1]) / 2, (vals[-1:] + ulp_top / 2), vals[1:2] / 2, vals]).float()
    up = torch.nextafter(mids, torch.full_like(mids, float("inf")))
    down = torch.nextafter(mids, torch.full_like(mids, -float("inf")))
    edges = torch.tensor([3.4028234663852886e38, float("inf"), 0.0, 1e-38, 1e-45], dtype=torch.float32)
    near = torch.cat([mids, up, down, edges])
    return torch.cat([bf, rnd, _u32(near), _u32(-near)])


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_encode_midpoints_edges_and_patterns(catalog, name):
    fmt = catalog.element(name)
    x = H._from_bits(_patterns(fmt))
    ours = getattr(H, f"encode_{name}")(x)
    finite = torch.isfinite(x)
    theirs = ORACLES[name][0](x)
    bad = (ours != theirs) & finite
    assert not bool(bad.any()), (x[bad][:5], ours[bad][:5], theirs[bad][:5])
    sign = 1 << (fmt.width - 1)
    decoded = getattr(H, f"decode_{name}")(ours)
    # NaN: the format's NaN (finite formats have none and saturate); the sign is kept
    nan = torch.isnan(x)
    assert bool((decoded[nan].isnan() if fmt.specials != "finite" else decoded[nan].abs() == fmt.max_value).all())
    assert torch.equal(ours[nan] & sign, torch.where(_u32(x[nan]) >> 31 == 1, sign, 0))
    # infinities: saturate to ±max, or stay infinite
    inf = torch.isinf(x)
    want = torch.where(x[inf] > 0, 1.0, -1.0) * (fmt.max_value if fmt.overflow == "saturate" else float("inf"))
    assert torch.equal(decoded[inf], want.float())
    # signed zeros
    zeros = getattr(H, f"encode_{name}")(torch.tensor([0.0, -0.0]))
    assert zeros.tolist() == [0, sign]


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_roundtrip_every_finite_code(catalog, name):
    fmt = catalog.element(name)
    codes = _all_codes(fmt.width)
    dec = getattr(H, f"decode_{name}")(codes)
    finite = torch.isfinite(dec)
    back = getattr(H, f"encode_{name}")(dec)
    assert torch.equal(back[finite], codes[finite])


def test_e5m6_tiny_values_carry_by_float32_bits(catalog):
    """Below fp16's normal range the E5M6 carry looks at float32 bits that were not dropped: a value far
    below the smallest subnormal can encode to the smallest subnormal, a value just above it to zero."""
    enc = H.encode_e5m6
    tiny = H._from_bits(torch.tensor([(100 << 23) | 0x1FFFF, (100 << 23) | 0x10000, (106 << 23) | 0x400000]))
    # ~2^-27 -> 2^-20 (carry); 2^-27 -> 0; 0.75 * 2^-20 -> 0 (nearest even would give 2^-20)
    assert enc(tiny).tolist() == [1, 0, 0]
    assert enc(torch.tensor([2.0 ** -20 * 1.75])).tolist() == [1]    # truncated, then no carry (low bits 0)


def test_bf16_codec_every_code_and_rne():
    codes = _all_codes(16)
    ours = H.decode_bf16(codes)
    theirs = codes.to(torch.int32).to(torch.int16).view(torch.bfloat16).float()
    assert torch.equal(ours.view(torch.int32), theirs.view(torch.int32))
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(0, 1 << 32, (1 << 20,), generator=g, dtype=torch.int64)
    x = H._from_bits(bits)
    ok = ~torch.isnan(x)
    enc = H.encode_bf16(x)
    ref = x.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF
    assert torch.equal(enc[ok], ref[ok])


def test_packing_layouts_match_the_reference_files(catalog):
    """FP4: element 2i in the low nibble. E5M6: w0 = h0<<20 | h1<<8 | h2>>4, w1 = (h2&0xF)<<28 | h3<<16 |
    h4<<4 | h5>>8, w2 = (h5&0xFF)<<24 | h6<<12 | h7, words little-endian."""
    from tkgen.runtime.torch_prims import _pack_codes, _unpack_codes
    g = torch.Generator().manual_seed(1)
    c4 = torch.randint(0, 16, (3, 64), generator=g)
    p4 = catalog.element("e2m1").pack
    packed = _pack_codes(c4, p4.key(), torch.int8)
    assert torch.equal(packed.view(torch.uint8).to(torch.int64), c4[:, 0::2] | (c4[:, 1::2] << 4))
    assert torch.equal(_unpack_codes(packed, p4.key()), c4)
    h = torch.randint(0, 4096, (3, 64), generator=g)
    p12 = catalog.element("e5m6").pack
    packed = _pack_codes(h, p12.key(), torch.uint8)
    assert packed.shape == (3, 96)
    k = [h[:, j::8] for j in range(8)]
    w0 = k[0] << 20 | k[1] << 8 | k[2] >> 4
    w1 = (k[2] & 0xF) << 28 | k[3] << 16 | k[4] << 4 | k[5] >> 8
    w2 = (k[5] & 0xFF) << 24 | k[6] << 12 | k[7]
    words = torch.stack([w0, w1, w2], -1).reshape(3, -1)
    le = torch.stack([(words >> (8 * b)) & 0xFF for b in range(4)], -1).reshape(3, -1)
    assert torch.equal(packed.to(torch.int64), le)
    assert torch.equal(_unpack_codes(packed, p12.key()), h)


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1", "bf16"])
def test_round_positive_is_the_codec_round_trip(catalog, name):
    """formats.round_positive (the rounding of E4M3-type scales, in float32 arithmetic and bit operations)
    gives decode(encode(v)) for every v >= 0 and NaN of the patterns: midpoints, neighbours, subnormals,
    the overflow edges, inf."""
    from tkgen.ir import prim as ir
    from tkgen.codegen.printers import TorchPrinter
    from tkgen.runtime import torch_prims
    fmt = catalog.element(name)
    x = H._from_bits(_patterns(fmt) if name != "bf16" else _patterns(catalog.element("e4m3"))).abs()
    src = TorchPrinter()(F.round_positive(fmt, ir.Var("x", ir.F32)))
    ours = eval(src, {**vars(torch_prims), "x": x})      # noqa: S307  (a test evaluating generated source)
    theirs = getattr(H, f"decode_{name}")(getattr(H, f"encode_{name}")(x))
    assert bool(_same_float(ours, theirs).all()), (x[~_same_float(ours, theirs)][:5])
