"""E4M3 scales (TileKernels' use_e4m3_sf, scale="e4m3"): sf = e4m3(max(amax, MAX * 2^-9) / MAX), inv = 1 / sf,
against the oracle of test_oracles (torch's float8 cast), bit for bit, at the cases that matter: an
all-zero group (sf = 2^-9, e4m3's smallest subnormal), an amax whose scale rounds down (x * inv passes 448
and saturates), a scale past 448 (saturates), and the sign of zero; then cast_back and
per_token_cast_and_cast_back on those scales."""
import pytest
import torch

import tkgen.ops as ops
from test_oracles import oracle_per_token_cast, same_bits


def groups(*rows, width=32):
    """One row per list of group amaxes: each group holds its amax once, the rest a fraction of it."""
    g = torch.Generator().manual_seed(3)
    out = []
    for amaxes in rows:
        row = []
        for a in amaxes:
            v = (torch.rand(width, generator=g) * 2 - 1) * a
            v[7] = a
            row.append(v)
        out.append(torch.cat(row))
    return torch.stack(out)


# group amaxes: zero and tiny (floored: sf = 2^-9), the floor itself, 448, scales that round down and up
# (a / 448 = 1.0624 and 1.0626, about the tie 1.0625 between e4m3's 1.0 and 1.125), scales past 448 (1e6 /
# 448 and 3e38 / 448 saturate), powers of two, and scales among e4m3's subnormals (1.3125 / 448 is the tie
# 1.5 * 2^-9, to 2 * 2^-9)
AMAXES = [[0.0, 1e-30, 0.875, 448.0], [448 * 1.0624, 448 * 1.0626, 300.0, 1e6], [1.0, 2.0 ** 20, 3e38, 7.0],
          [1.3125, 1.9, 3.3, 6.5]]


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_token_cast_with_e4m3_scales(fmt, dtype):
    x = groups(*AMAXES).to(dtype)
    q, sf = ops.per_token_cast(x, fmt, 32, "e4m3")
    oq, osf = oracle_per_token_cast(x, fmt, 32, "e4m3")
    assert sf.dtype == torch.float8_e4m3fn and sf.shape == (4, 4)
    assert same_bits(q, oq) and same_bits(sf, osf)
    if fmt == "e4m3":
        assert sf.view(torch.uint8)[0, 0] == 0x01                 # 0.875 / 448 = 2^-9
        assert sf.view(torch.uint8)[1, 3] == 0x7E                 # 1e6 / 448 saturates at 448
        assert sf.view(torch.uint8)[3, 0] == 0x02                 # the tie 1.5 * 2^-9 to even
        assert q.float().abs().max() == 448.0                     # saturated codes, never NaN
        assert not torch.isnan(q.float()).any()
    assert same_bits(ops.per_token_cast_with_sf_only(x, fmt, 32, "e4m3"), sf)


def test_scales_that_round_down_saturate_the_codes():
    x = groups([448 * 1.0624]).float()            # a / 448 = 1.0624 rounds to e4m3 1.0: x * inv up to 475.9
    q, sf = ops.per_token_cast(x, "e4m3", 32, "e4m3")
    assert sf.float().item() == 1.0 and q.float()[0, 7].item() == 448.0


@pytest.mark.parametrize("out", ["bf16", "fp32"])
def test_cast_back_and_fake_quantization_with_e4m3_scales(out):
    x = groups(*AMAXES).float()
    q, sf = ops.per_token_cast(x, "e4m3", 32, "e4m3")
    y = ops.cast_back(q, sf, "e4m3", 32, "e4m3", out)
    want = (q.float() * sf.float().repeat_interleave(32, 1)).to(y.dtype)
    assert same_bits(y, want)
    assert same_bits(ops.per_token_cast_and_cast_back(x, "e4m3", 32, "e4m3", out), y)
