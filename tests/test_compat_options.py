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
        return sf, fmt_max / a
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
