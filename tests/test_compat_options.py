"""TileKernels options the compat layers once refused (issue 28), each checked bit for bit on the CPU against a
plain-torch model of the documented semantics (operators-v1.md / operators-v2.md), written here from the
documents and not from tkgen's generated references."""
from __future__ import annotations

import pytest
import torch

import tkgen.compat.tilekernels_v1 as tk1
from tkgen.runtime.libm import expf

E4M3_MAX = 448.0


def bits_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    a, b = got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
    bad = (a != b).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} bytes differ, first at {bad[0].tolist()}"


def sf_and_inv(amax, floor, round_sf, fmt_max=E4M3_MAX):
    """operators-v1.md 0.3: the floor, sf = a / MAX, inv = MAX / a, or both a power of two (sf rounded up)."""
    a = torch.maximum(amax, torch.tensor(floor, dtype=torch.float32))
    sf = a / fmt_max
    if not round_sf:
        return sf, torch.full_like(a, fmt_max) / a      # (a scalar / tensor in torch is a reciprocal times it)
    e = ((sf.view(torch.int32) - 1) >> 23) + 1 - 127
    return ((127 + e) << 23).view(torch.float32), ((127 - e) << 23).view(torch.float32)


def to_e4m3(v):
    return v.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def edgy(rows, cols, dtype=torch.bfloat16, seed=0):
    """Random rows with an all-zero row, a row of signed zeros, tiny values, large values and ties."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.rand(rows, 1, generator=g).mul(8).exp2()
    x[1] = 0.0
    x[2] = -0.0
    x[3] = torch.randn(cols, generator=g) * 1e-30
    x[4] = torch.randn(cols, generator=g) * 3e4
    x[5, ::2] = -0.0
    return x.to(dtype)


# --- the first release's swiglu_forward_and_per_token_cast(..., sf_clamp_min=...) -----------------------------

def swiglu_cast_model(x, npc, round_sf, clamp_min, weights=None):
    """operators-v1.md 2.1 and 0.3: act = a / (1 + exp(-a)) * b in float32 (libm's expf, as the C kernel calls
    it), times the row weight, then per group of npc: amax floored at clamp_min, scale, cast to e4m3."""
    h = x.shape[1] // 2
    a, b = x[:, :h].float(), x[:, h:].float()
    y = a / (1 + expf(-a)) * b
    if weights is not None:
        y = y * weights[:, None]
    groups = y.view(y.shape[0], -1, npc)
    sf, inv = sf_and_inv(groups.abs().amax(-1), clamp_min, round_sf)
    return to_e4m3(groups * inv[..., None]).view(y.shape), sf


@pytest.mark.parametrize("clamp_min", [None, 1e-4, 3.0, 1e-20, 0.75])
@pytest.mark.parametrize("round_sf", [False, True])
def test_v1_swiglu_forward_and_per_token_cast_sf_clamp_min(clamp_min, round_sf):
    x = edgy(24, 2 * 256, seed=int(round_sf))
    w = torch.rand(24, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(24, dtype=torch.int32)
    q, sf = tk1.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128, pos, w[:, None], round_sf=round_sf,
                                                        sf_clamp_min=clamp_min)
    want_q, want_sf = swiglu_cast_model(x, 128, round_sf, 1e-4 if clamp_min is None else clamp_min, w)
    bits_equal(q, want_q)
    bits_equal(sf, want_sf)
    if clamp_min is not None and clamp_min > 1:       # the floor shows: the zero and tiny rows' scales
        assert torch.all(sf[1:4] == sf_and_inv(torch.zeros(()), clamp_min, round_sf)[0])


# --- the first release's per_channel_cast_fused(..., pos_to_token=...) ------------------------------------------

def per_channel_fused_model(x, sf_in, pos, npt, round_sf):
    """operators-v1.md 1.9: y[r] = x[p] * sf_in[p] (float32, per 128 channels) with p = pos[r], a zero row where
    p < 0; then per channel and block of npt rows (the last one partial) the amax, its floor and scale, and
    out = e4m3((x * sf_in) * sf_inv)."""
    rows, h = pos.shape[0], x.shape[1]
    y = torch.zeros(rows, h)
    ok = pos >= 0
    src = x.float()
    if sf_in is not None:
        src = src * sf_in.repeat_interleave(128, dim=1)
    y[ok] = src[pos[ok].long()]
    out = torch.empty(rows, h, dtype=torch.float8_e4m3fn)
    sfs = []
    for start in range(0, rows, npt):
        block = y[start:start + npt]
        sf, inv = sf_and_inv(block.abs().amax(0), 1e-4, round_sf)
        out[start:start + npt] = to_e4m3(block * inv)
        sfs.append(sf)
    return out, torch.stack(sfs) if sfs else torch.empty(0, h)


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("npt, rows", [(128, 256), (128, 144), (32, 80)])
def test_v1_per_channel_cast_fused_pos_to_token(quantized, round_sf, npt, rows):
    g = torch.Generator().manual_seed(rows + npt)
    t_in, h = 37, 384
    x = edgy(t_in, h, seed=rows)
    pos = torch.randint(-1, t_in, (rows,), generator=g, dtype=torch.int32)
    pos[:3] = torch.tensor([1, 2, -1])                  # the zero rows, a padding row, then repeats
    pos[-5:] = 4                                        # one source row many times (a column of large values)
    if quantized:
        q, sf_in = tk1.quant.per_token_cast(x, "e4m3", 128)
        sf_in[3, 1] = 3e-30                             # a tiny input scale, and one that is no power of two
        got = tk1.quant.per_channel_cast_fused((q, sf_in), "e4m3", npt, round_sf, 128, pos)
        want = per_channel_fused_model(q, sf_in, pos, npt, round_sf)
    else:
        got = tk1.quant.per_channel_cast_fused(x, "e4m3", npt, round_sf, None, pos)
        want = per_channel_fused_model(x, None, pos, npt, round_sf)
    bits_equal(got[0], want[0])
    bits_equal(got[1], want[1])
    assert torch.all(got[0][2].float() == 0)            # the padding row


def test_v1_per_channel_cast_fused_gathers_odd_widths_and_checks_arguments():
    x = edgy(9, 96, dtype=torch.float32)
    pos = torch.tensor([8, -1, 0, 3] * 8, dtype=torch.int32)
    got = tk1.quant.per_channel_cast_fused(x, "e4m3", 32, True, None, pos)
    want = per_channel_fused_model(x, None, pos, 32, True)
    bits_equal(got[0], want[0])
    bits_equal(got[1], want[1])
    with pytest.raises(TypeError, match="pos_to_token"):
        tk1.quant.per_channel_cast_fused(x, "e4m3", 32, True, None, pos.long())
    with pytest.raises(ValueError, match="num_per_channels"):
        tk1.quant.per_channel_cast_fused(x, "e4m3", 32, True, 128, pos)
