"""Generated codecs, checked exhaustively against torch's own dtypes where it has the format."""
import pytest
import torch

from tkgen import formats as F
from tkgen import registry

registry.use_generated()
from tkgen_generated.common import torch_helpers as H  # noqa: E402


def _all_codes(bits):
    return torch.arange(1 << bits, dtype=torch.int64)


def test_e4m3_decode_every_code(catalog):
    codes = _all_codes(8)
    ours = H.decode_e4m3(codes)
    theirs = codes.to(torch.uint8).view(torch.float8_e4m3fn).float()
    same = (ours.view(torch.int32) == theirs.view(torch.int32)) | (ours.isnan() & theirs.isnan())
    assert bool(same.all())
    assert catalog.element("e4m3").max_value == 448.0


def _float_patterns():
    """Every bf16-representable float32 (all exponents, signs, NaNs, infinities) plus, for every pair of
    adjacent e4m3 values, the exact midpoint and its two float32 neighbours."""
    bf = (torch.arange(1 << 16, dtype=torch.int64) << 16)
    vals = torch.arange(256, dtype=torch.int64).to(torch.uint8).view(torch.float8_e4m3fn).double()
    vals = vals[torch.isfinite(vals)].unique()
    mids = ((vals[1:] + vals[:-1]) / 2).float()
    near = torch.cat([mids, torch.nextafter(mids, torch.full_like(mids, float("inf"))),
                      torch.nextafter(mids, torch.full_like(mids, -float("inf")))])
    edges = torch.tensor([448.0, 464.0, 480.0, 3.4e38, 2.0 ** -9, 2.0 ** -10, 1.5 * 2 ** -10], dtype=torch.float32)
    more = torch.cat([near, -near, edges, -edges]).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return torch.cat([bf, more])


def test_e4m3_encode_matches_torch_on_midpoints_edges_and_all_bf16_patterns():
    u = _float_patterns()
    x = H._from_bits(u)
    ours = H.encode_e4m3(x)
    finite = torch.isfinite(x)
    # torch 2.13 saturates on its own; clamping first is what the kernels do, and pins older versions too
    theirs = x.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int64)
    assert torch.equal(ours[finite], theirs[finite])
    nan = torch.isnan(x)
    assert bool(((ours[nan] & 0x7F) == 0x7F).all())                         # NaN stays NaN, sign kept
    inf = torch.isinf(x)
    assert torch.equal(ours[inf], torch.where(x[inf] > 0, 0x7E, 0xFE))       # saturating, finite-only


def test_e4m3_roundtrip_every_code():
    codes = _all_codes(8)
    finite = codes & 0x7F != 0x7F
    back = H.encode_e4m3(H.decode_e4m3(codes))
    assert torch.equal(back[finite], codes[finite])


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


@pytest.mark.parametrize("name", ["e4m3", "bf16"])
def test_python_decoder_agrees_with_generated(catalog, name):
    fmt = catalog.element(name)
    codes = _all_codes(fmt.width)
    gen = getattr(H, f"decode_{name}")(codes)
    py = torch.tensor([F.decode_code_python(fmt, int(c)) for c in codes], dtype=torch.float32)
    assert bool(((gen == py) | (gen.isnan() & py.isnan())).all())
