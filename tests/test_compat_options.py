"""TileKernels options the compat layers once refused (issue 28), each checked bit for bit on the CPU against a
plain-torch model of the documented semantics (operators-v1.md / operators-v2.md), written here from the
documents and not from tkgen's generated references."""
from __future__ import annotations

import pytest
import torch

import tkgen.compat.tilekernels as tk
import tkgen.compat.tilekernels_v1 as tk1
import tkgen.ops as ops
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


@pytest.mark.parametrize("clamp_min", [None, 1e-4, 3.0, 1e-20, 0.123456789])
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
    q, sf = tk1.quant.per_token_cast(edgy(9, 128), "e4m3", 128, round_sf=True, use_packed_ue8m0=True)
    with pytest.raises(TypeError, match="float32 scales with pos_to_token"):     # operators-v1.md 1.9
        tk1.quant.per_channel_cast_fused((q, sf), "e4m3", 32, True, 128, pos)


# --- 2.1.0's (and 1.0's) per_token_cast of a quantized input (x_block_size) -------------------------------------

E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def decode_e2m1(packed):
    """operators-v1.md 0.2: two codes per int8, element 2i in the low nibble; s e e m, bias 1."""
    b = packed.view(torch.uint8).long()
    codes = torch.stack([b & 0xF, b >> 4], dim=-1).flatten(-2)
    mag = E2M1_VALUES[codes & 7]
    return torch.where(codes >= 8, -mag, mag)


def encode_e2m1(v):
    """Round to nearest e2m1 value, ties to the even code, saturating at 6; the sign kept (-0 is code 8)."""
    m = v.abs()
    best = torch.zeros(m.shape, dtype=torch.long)
    best_d = (m - E2M1_VALUES[0]).abs()
    for code in range(1, 8):
        d = (m - E2M1_VALUES[code]).abs()
        take = (d < best_d) | ((d == best_d) & (code % 2 == 0))
        best, best_d = torch.where(take, code, best), torch.where(take, d, best_d)
    best = torch.where(m > 6, 7, best) | torch.where(torch.signbit(v), 8, 0)
    pairs = best.view(*v.shape[:-1], -1, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8).view(torch.int8)


def requant_model(q, sf_in, block, npc, fmt, round_sf):
    """operators-v1.md 1.1 (quantized input): v = q * sf_in per (rows, cols) block; per row and group of npc the
    amax of v, floored (1e-4 for e4m3, 6 * 2^-126 for e2m1), the scale, and out = cvt(q * (sf_in * sf_inv))."""
    qf = decode_e2m1(q) if q.dtype == torch.int8 else q.float()
    t, h = qf.shape
    if sf_in.dtype == torch.int32:               # packed UE8M0 bytes, four blocks per word
        sf_in = (sf_in.contiguous().view(torch.uint8)[:, :h // block[1]].int() << 23).view(torch.float32)
    s = sf_in.float().repeat_interleave(block[0], 0)[:t].repeat_interleave(block[1], 1)
    fmt_max, floor = (E4M3_MAX, 1e-4) if fmt == "e4m3" else (6.0, 6 * 2.0 ** -126)
    amax = (qf * s).abs().view(t, -1, npc).amax(-1)
    sf, inv = sf_and_inv(amax, floor, round_sf, fmt_max)
    y = qf * (s * inv.repeat_interleave(npc, 1))
    return (to_e4m3(y) if fmt == "e4m3" else encode_e2m1(y)), sf


def quantized_input(in_fmt, rows, block, packed_sf, seed, small_sf=False):
    """Codes with a zero row, a row of -0 (and saturated codes), and input scales that are no powers of two,
    tiny and huge. With small_sf the scales stay below 4: an all-zero group cast into e2m1 has inv = 2^126 (the
    floor's), and a larger input scale would make the kernel's s_in * inv infinite, 0 * inf = NaN."""
    g = torch.Generator().manual_seed(seed)
    h = 384
    if in_fmt == "e4m3":
        q = to_e4m3(torch.randn(rows, h, generator=g) * 100)
        q[2] = -0.0
        q[3, :5] = E4M3_MAX
    else:
        q = torch.randint(-128, 128, (rows, h // 2), generator=g, dtype=torch.int8)
        q[2] = -128                               # 0x80: +0 then -0
    q[1] = 0
    nbm, nbk = -(-rows // block[0]), h // block[1]
    if packed_sf:
        b = torch.randint(100, 129 if small_sf else 150, (nbm, -(-nbk // 4) * 4), generator=g, dtype=torch.uint8)
        return q, b.view(torch.int32)
    sf = torch.rand(nbm, nbk, generator=g) * 4 + 0.01   # no powers of two: the order of the products shows
    sf[0, 0] = 3e-30
    sf[-1, -1] = 3.5 if small_sf else 7e30
    return q, sf


@pytest.mark.parametrize("in_fmt, fmt, npc, block, flags", [
    ("e4m3", "e4m3", 128, (128, 128), (False, False, False)),
    ("e4m3", "e4m3", 32, (128, 128), (False, True, False)),
    ("e4m3", "e2m1", 32, (32, 32), (True, True, True)),
    ("e4m3", "e4m3", 128, (32, 32), (False, False, False)),
    ("e4m3", "e4m3", 128, (1, 128), (True, True, True)),
    ("e2m1", "e4m3", 32, (32, 32), (True, True, True)),
    ("e2m1", "e2m1", 32, (1, 32), (False, False, False)),
    ("e2m1", "e4m3", 32, (128, 128), (True, True, True)),
    # blocks with no param value of per_token_cast_requant: their scales repeated to 1-row or 32-channel blocks
    ("e4m3", "e4m3", 128, (64, 64), (False, True, False)),
    ("e2m1", "e4m3", 32, (16, 192), (True, True, True)),
    ("e4m3", "e2m1", 32, (1, 384), (False, False, False)),
    ("e4m3", "e4m3", 128, (200, 96), (True, True, True)),
    # narrower than 32 channels (NVFP4's 1 x 16 blocks; 6 and 24 channels repeated to 2-channel blocks)
    ("e2m1", "e4m3", 32, (1, 16), (False, False, False)),
    ("e4m3", "e2m1", 32, (16, 16), (True, True, True)),
    ("e4m3", "e4m3", 128, (1, 6), (False, True, False)),
    ("e2m1", "e2m1", 32, (4, 24), (True, True, True)),
])
def test_per_token_cast_of_a_quantized_input(in_fmt, fmt, npc, block, flags):
    col, round_sf, packed = flags
    rows = 200
    q, sf_in = quantized_input(in_fmt, rows, block, packed, seed=npc + block[0], small_sf=fmt == "e2m1")
    want_q, want_sf = requant_model(q, sf_in, block, npc, fmt, round_sf)
    for module in (tk, tk1):
        got_q, got_sf = module.quant.per_token_cast((q, sf_in), fmt, npc, block, col, round_sf, packed)
        bits_equal(got_q, want_q)
        if packed:                                # exponent bytes (the tail of the last word undefined)
            want_bytes = ((want_sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
            assert got_sf.dtype == torch.int32 and got_sf.stride(0) == 1
            dense = torch.empty(got_sf.shape, dtype=torch.int32).copy_(got_sf)   # (a [T, 1] view is "contiguous")
            bits_equal(dense.view(torch.uint8)[:, :want_bytes.shape[1]], want_bytes)
        else:
            assert not col or got_sf.stride(0) == 1
            bits_equal(got_sf.contiguous(), want_sf)


def test_per_token_cast_of_a_quantized_input_checks_arguments():
    q, sf = quantized_input("e4m3", 8, (1, 128), False, 0)
    with pytest.raises(ValueError, match="x_block_size"):
        tk.quant.per_token_cast((q, sf), "e4m3", 128)
    with pytest.raises(NotImplementedError, match="stochastic_cast=True into e2m1"):
        tk.quant.per_token_cast((q, sf), "e2m1", 32, (1, 128), stochastic_cast=True)
    with pytest.raises(TypeError, match="float8_e4m3fn or FP4"):
        tk.quant.per_token_cast((q.view(torch.float8_e5m2), sf), "e4m3", 128, (1, 128))
    with pytest.raises(NotImplementedError, match="odd number of channels"):
        tk.quant.per_token_cast((q, sf), "e4m3", 128, (1, 3))
    out = (torch.empty(8, 384, dtype=torch.float8_e4m3fn), torch.empty(8, 3))
    assert tk.quant.per_token_cast((q, sf), "e4m3", 128, (1, 128), out=out) is out
    bits_equal(out[0], requant_model(q, sf, (1, 128), 128, "e4m3", False)[0])


# --- 2.1.0's per_channel_cast of a plain input with use_packed_ue8m0 ---------------------------------------------

@pytest.mark.parametrize("npt, rows, dtype", [(128, 256, torch.bfloat16), (32, 96, torch.float32),
                                              (32, 160, torch.bfloat16)])
def test_per_channel_cast_of_a_plain_input_packed_ue8m0(npt, rows, dtype):
    """operators-v2.md 2.13 and its 1.5 item 6: per channel and block of npt rows, the power-of-two scale of the
    floored amax; out_sf int32 [ceil(T / npt / 4), H], the exponent byte of row group j in byte j % 4 of word
    j // 4 (the padding bytes of the last word are not compared)."""
    x = edgy(rows, 384, dtype=dtype, seed=npt)
    out, out_sf = tk.quant.per_channel_cast(x, "e4m3", npt, True, None, True)
    want_out, want_sf = per_channel_fused_model(x, None, torch.arange(rows, dtype=torch.int32), npt, True)
    bits_equal(out, want_out)
    groups = rows // npt
    assert out_sf.dtype == torch.int32 and out_sf.shape == (-(-groups // 4), 384) and out_sf.is_contiguous()
    exps = ((want_sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)               # [groups, H]
    got = out_sf.view(torch.uint8).view(-(-groups // 4), 384, 4).permute(0, 2, 1).reshape(-1, 384)[:groups]
    bits_equal(got, exps)
    with pytest.raises(ValueError, match="use_packed_ue8m0.*needs round_sf=True"):
        tk.quant.per_channel_cast(x, "e4m3", npt, False, None, True)


# --- the first release's transpose of a row-strided input ---------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn])
@pytest.mark.parametrize("row_stride", [2 * 192, 192 + 64, 196])
def test_v1_transpose_of_a_row_strided_input(dtype, row_stride):
    """operators-v1.md 5.1: out[j, i] = x[i, j], contiguous, bit for bit, for x with padded rows (its tests use a
    row stride of 2N); the bytes include NaN, inf, -0 and subnormals."""
    g = torch.Generator().manual_seed(row_stride)
    base = torch.randn(70, row_stride, generator=g)
    base[3, :4] = torch.tensor([float("nan"), float("inf"), -0.0, 1e-40])
    base = base.clamp(-400, 400).to(dtype) if dtype == torch.float8_e4m3fn else base.to(dtype)
    x = base[:, :192]
    assert not x.is_contiguous()
    got = tk1.transpose.transpose(x)
    assert got.is_contiguous() and got.shape == (192, 70)
    bits_equal(got, torch.stack([x[:, j] for j in range(192)]))


# --- 2.1.0's per_token_cast_with_precomputed_sf with e4m3 scales (use_e4m3_sf) ------------------------------------

@pytest.mark.parametrize("fmt, npc, dtype", [("e4m3", 128, torch.bfloat16), ("e4m3", 32, torch.float32),
                                             ("e2m1", 32, torch.bfloat16)])
def test_per_token_cast_with_precomputed_e4m3_sf(fmt, npc, dtype):
    """operators-v2.md 2.9 and its E4M3 SF rule: the quantization factor is 1 / float(sf), a float32 division;
    q = cvt(x * that). The scales: a per_token_cast's own, then random e4m3 codes (subnormal ones and 448)."""
    x = edgy(40, 256, dtype=dtype, seed=npc)
    _, sf = tk.quant.per_token_cast(x, fmt, npc, use_e4m3_sf=True)
    g = torch.Generator().manual_seed(7)
    rand_sf = (torch.rand(sf.shape, generator=g) * 3).clamp(min=2.0 ** -9).to(torch.float8_e4m3fn)   # no 0: inv inf
    rand_sf[0, :2] = torch.tensor([2.0 ** -9, 448.0])
    for scales in (sf, rand_sf):
        inv = torch.full(scales.shape, 1.0) / scales.float()
        y = x.float() * inv.repeat_interleave(npc, 1)
        want = to_e4m3(y) if fmt == "e4m3" else encode_e2m1(y)
        bits_equal(tk.quant.per_token_cast_with_precomputed_sf(x, fmt, npc, scales, use_e4m3_sf=True), want)
    with pytest.raises(TypeError, match="use_e4m3_sf"):
        tk.quant.per_token_cast_with_precomputed_sf(x, fmt, npc, sf)


# --- 2.1.0's per_token_cast_with_precomputed_sf with packed UE8M0 scales ------------------------------------------

@pytest.mark.parametrize("fmt, npc, dtype, groups", [("e4m3", 128, torch.bfloat16, 2), ("e4m3", 32, torch.float32, 8),
                                                     ("e2m1", 32, torch.bfloat16, 6), ("e4m3", 64, torch.bfloat16, 5)])
def test_per_token_cast_with_precomputed_packed_ue8m0_sf(fmt, npc, dtype, groups):
    """operators-v2.md 1.5 (items 5 and 8) and 2.9: int32 scales are packed UE8M0, four exponent bytes a word (group
    4w + j in byte j of word w); a byte b is the scale 2^(b - 127), and q = cvt(x * (1 / sf)), a float32 division.
    The scales: a per_token_cast's own packed ones (row- and column-major), then random bytes (1 and 254 included)."""
    x = edgy(40, npc * groups, dtype=dtype, seed=npc + groups)
    _, sf = tk.quant.per_token_cast(x, fmt, npc, round_sf=True, use_packed_ue8m0=True)
    _, sf_col = tk.quant.per_token_cast(x, fmt, npc, use_tma_aligned_col_major_sf=True, round_sf=True,
                                        use_packed_ue8m0=True)
    g = torch.Generator().manual_seed(groups)
    words = -(-groups // 4)
    rand_bytes = torch.randint(100, 155, (40, 4 * words), generator=g, dtype=torch.int32).to(torch.uint8)
    rand_bytes[0, :2] = torch.tensor([1, 254], dtype=torch.uint8)
    rand_sf = rand_bytes.view(torch.int32)
    for scales in (sf, sf_col, rand_sf):
        assert scales.dtype == torch.int32 and scales.shape == (40, words)
        row_major = torch.empty(scales.shape, dtype=torch.int32).copy_(scales)       # fresh strides, even for one word
        b = row_major.view(torch.uint8)[:, :groups].to(torch.float64)
        scale = torch.pow(2.0, b - 127).float()                                  # exact, 2^-126 .. 2^127
        inv = torch.full(scale.shape, 1.0) / scale
        y = x.float() * inv.repeat_interleave(npc, 1)
        want = to_e4m3(y) if fmt == "e4m3" else encode_e2m1(y)
        bits_equal(tk.quant.per_token_cast_with_precomputed_sf(x, fmt, npc, scales, use_packed_ue8m0=True), want)
    q, _ = tk.quant.per_token_cast(x, fmt, npc, round_sf=True)
    bits_equal(tk.quant.per_token_cast_with_precomputed_sf(x, fmt, npc, sf), q)      # its own scales: the same codes


# --- 2.1.0's SwiGLU ops with psum_num_tokens_per_expert (the psum layout) -----------------------------------------

def psum_layout(counts, alignment, extra_rows=0):
    """operators-v2.md 2.7: psum[e] = start_e + count_e with start_0 = 0 and start_e = align(psum[e - 1], A);
    expert e's valid rows are [start_e, psum[e]). The layout has align(psum[-1], A) rows, then extra_rows
    more (past the layout: padding to the forward, ordinary rows to the backward, 2.8)."""
    psum, starts, start = [], [], 0
    for c in counts:
        starts.append(start)
        psum.append(start + c)
        start = -(-(start + c) // alignment) * alignment
    valid = torch.zeros(start + extra_rows, dtype=torch.bool)
    for s, e in zip(starts, psum):
        valid[s:e] = True
    tail = torch.arange(start + extra_rows) >= start
    return torch.tensor(psum, dtype=torch.int32), valid, tail


def swiglu_inputs(rows, h, valid, seed):
    """x with garbage (huge values, which the clamp counts would see) on the padding rows, and row weights."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2 * h, generator=g) * 2
    x[~valid] = 1e4
    return x.bfloat16(), torch.rand(rows, generator=g) + 0.5


@pytest.mark.parametrize("alignment, counts", [(16, [5, 0, 17, 3]), (128, [130, 1, 0, 40]), (1, [3, 4])])
def test_swiglu_forward_psum_layout(alignment, counts):
    """operators-v2.md 2.7: on the valid rows, act = a / (1 + exp(-a)) * b (a, b clamped at c first) times
    w = topk_weights[row] * rsf, as bf16 or cast per token; padding rows are not written (not compared) and not
    counted: the counter gets [#(a > c), #(b > c), #(b < -c), valid rows * H] over the valid rows."""
    psum, valid, _ = psum_layout(counts, alignment, extra_rows=5)
    h, c, rsf = 128, 0.5, 2.5
    x, w = swiglu_inputs(valid.shape[0], h, valid, alignment)
    tk.set_token_alignment(alignment)
    try:
        count = torch.full((4,), 3, dtype=torch.int64)
        out = tk.quant.swiglu_forward(x, "bf16", psum, w, rsf, c, count)
        count8 = torch.zeros(4, dtype=torch.int64)
        q, sf = tk.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 32, psum, w, rsf, False, True, False, c, count8)
    finally:
        tk.reset_runtime_config()
    a, b = x[:, :h].float(), x[:, h:].float()
    want_counts = [int((a[valid] > c).sum()), int((b[valid] > c).sum()), int((b[valid] < -c).sum()),
                   int(valid.sum()) * h]
    assert count.tolist() == [3 + n for n in want_counts] and count8.tolist() == want_counts
    ac, bc = a.clamp(max=c), b.clamp(-c, c)
    wr = w * rsf
    act = ac / (1 + expf(-ac)) * bc * wr[:, None]
    bits_equal(out[valid], act.bfloat16()[valid])
    want_q, want_sf = swiglu_cast_model(torch.cat([ac, bc], 1), 32, True, 1e-4, wr)
    bits_equal(q[valid], want_q[valid])
    bits_equal(sf[valid], want_sf[valid])


@pytest.mark.parametrize("alignment, counts", [(16, [5, 0, 17, 3]), (32, [1, 40])])
def test_swiglu_backward_psum_layout(alignment, counts):
    """operators-v2.md 2.8: padding rows (inside [psum[e - 1], align(psum[e - 1], A))) are zero-filled in every
    output (x_grad, the FP8 codes, the scale bytes, weight_grad, act_out); every other row, those past
    align(psum[-1], A) included, is what the same call without the layout gives (its numerics held elsewhere:
    tests/test_compat.py, tests/test_swiglu_backward_v1.py)."""
    psum, valid, tail = psum_layout(counts, alignment, extra_rows=3)
    rows, h = valid.shape[0], 128
    x, w = swiglu_inputs(rows, h, valid | tail, alignment)
    grad = torch.randn(rows, h, generator=torch.Generator().manual_seed(1)).bfloat16()
    q, sf = tk.quant.per_token_cast(x, "e4m3", 32)
    pad = ~(valid | tail)
    assert pad.any() and tail.any()
    for packed, col in ((False, False), (True, True)):
        tk.set_token_alignment(alignment)
        try:
            got = tk.quant.swiglu_backward_and_per_token_cast((q, sf), grad, "e4m3", 32, psum, w, 2.5, col, packed,
                                                              packed, 0.5, True)
            plain = tk.quant.swiglu_backward(x, grad, "bf16", psum, w, 2.5, 0.5)
        finally:
            tk.reset_runtime_config()
        want = tk.quant.swiglu_backward_and_per_token_cast((q, sf), grad, "e4m3", 32, None, w, 2.5, col, packed,
                                                           packed, 0.5, True)
        want_plain = tk.quant.swiglu_backward(x, grad, "bf16", None, w, 2.5, 0.5)
        (xg, (fp8, fp8_sf), wg, act), (wxg, (wfp8, wsf), wwg, wact) = got, want
        assert fp8_sf.stride() == wsf.stride()
        fp8_sf, wsf = fp8_sf.contiguous(), wsf.contiguous()
        for t, u in ((xg, wxg), (fp8, wfp8), (fp8_sf, wsf), (wg, wwg), (act, wact), (plain[0], want_plain[0]),
                     (plain[1], want_plain[1])):
            bits_equal(t[~pad], u[~pad])
            assert not t[pad].view(torch.uint8).any() if t.element_size() == 1 else torch.all(t[pad] == 0)
            assert not torch.signbit(t[pad].float()).any()


# --- 2.1.0's per_token_cast of a quantized input with use_e4m3_sf, or with e4m3 input scales ------------------------

def e4m3_scale_pair(amax, fmt_max):
    """operators-v2.md 1.5 item 2 and 3: a = max(amax, fmt_max * 2^-9), sf = RNE_e4m3(a / MAX) (saturating),
    inv = 1 / float(sf), a float32 division."""
    a = torch.maximum(amax, torch.tensor(fmt_max * 2.0 ** -9))
    sf = to_e4m3(a / fmt_max)
    return sf, torch.full(a.shape, 1.0) / sf.float()


@pytest.mark.parametrize("in_fmt, fmt, npc, block, in_e4m3, out_e4m3, col", [
    ("e4m3", "e4m3", 128, (1, 128), True, True, False),
    ("e4m3", "e4m3", 32, (128, 128), True, False, True),
    ("e2m1", "e2m1", 32, (32, 32), False, True, True),
    ("e2m1", "e4m3", 32, (1, 32), True, True, False),
    ("e4m3", "e2m1", 32, (32, 32), False, True, False),
])
def test_per_token_cast_of_a_quantized_input_e4m3_scales(in_fmt, fmt, npc, block, in_e4m3, out_e4m3, col):
    """operators-v1.md 1.1 (quantized input: out = cvt(q * (sf_in * sf_inv)), the scales multiplied first) with
    2.1.0's E4M3 scales: input scales float8_e4m3fn decoded as float(sf) (2.14), output scales by 1.5 item 2."""
    rows = 72
    q, sf_in = quantized_input(in_fmt, rows, block, False, seed=npc + block[0], small_sf=True)
    if in_e4m3:
        sf_in = to_e4m3(sf_in.clamp(min=2.0 ** -9))
        sf_in[0, 0], sf_in[-1, -1] = 2.0 ** -9, 448.0 if fmt == "e4m3" else 3.5
    qf = decode_e2m1(q) if in_fmt == "e2m1" else q.float()
    s = sf_in.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)
    fmt_max = E4M3_MAX if fmt == "e4m3" else 6.0
    amax = (qf * s).abs().view(rows, -1, npc).amax(-1)
    if out_e4m3:
        want_sf, inv = e4m3_scale_pair(amax, fmt_max)
    else:
        want_sf, inv = sf_and_inv(amax, 1e-4 if fmt == "e4m3" else 6 * 2.0 ** -126, False, fmt_max)
    y = qf * (s * inv.repeat_interleave(npc, 1))
    want_q = to_e4m3(y) if fmt == "e4m3" else encode_e2m1(y)
    got_q, got_sf = tk.quant.per_token_cast((q, sf_in), fmt, npc, block, col, use_e4m3_sf=out_e4m3)
    bits_equal(got_q, want_q)
    assert not col or got_sf.stride(0) == 1
    bits_equal(got_sf.contiguous(), want_sf)
    with pytest.raises(ValueError, match="round_sf"):
        tk.quant.per_token_cast((q, sf_in), fmt, npc, block, round_sf=True, use_e4m3_sf=True)


# --- cast_back's x_special_fmt: the first release's E5M6, reserved in 2.1.0 ----------------------------------------

def decode_e5m6(packed):
    """operators-v1.md 0.6: three little-endian uint32 words per 8 codes, h0 at the top of w0; each 12-bit code
    is the top of an fp16."""
    w = packed.contiguous().view(torch.int32).long() & 0xFFFFFFFF
    w = w.view(w.shape[0], -1, 3)
    w0, w1, w2 = w[..., 0], w[..., 1], w[..., 2]
    h = [w0 >> 20, (w0 >> 8) & 0xFFF, ((w0 & 0xFF) << 4) | (w1 >> 28), (w1 >> 16) & 0xFFF, (w1 >> 4) & 0xFFF,
         ((w1 & 0xF) << 8) | (w2 >> 24), (w2 >> 12) & 0xFFF, w2 & 0xFFF]
    top = torch.stack(h, dim=-1).flatten(1) << 4                  # the fp16's bits, as a signed 16-bit value
    return (top - (top >= 0x8000).long() * 0x10000).to(torch.int16).view(torch.float16).float()


@pytest.mark.parametrize("out", ["fp32", "bf16"])
def test_cast_back_x_special_fmt(out):
    """The first release's cast_back((packed, sf), fmt, (1, H), x_special_fmt='e5m6') is decode(q) * sf rounded to
    fmt (1.6); 2.1.0 has no E5M6 (its x_special_fmt is reserved, must be None) and refuses it as a ValueError, as
    the first release refuses any other special format; codes of another dtype are a TypeError."""
    x = edgy(12, 256, dtype=torch.float32, seed=3)
    q, sf = tk1.quant.per_token_cast(x, "e5m6", 256)
    assert q.dtype == torch.uint8 and q.shape == (12, 384) and sf.shape == (12, 1)
    want = (decode_e5m6(q) * sf).to(torch.float32 if out == "fp32" else torch.bfloat16)
    bits_equal(tk1.quant.cast_back((q, sf), out, (1, 256), "e5m6"), want)
    bits_equal(tk1.quant.per_token_cast_back((q, sf), out, 256, x_special_fmt="e5m6"), want)
    with pytest.raises(ValueError, match="reserved"):
        tk.quant.cast_back((q, sf), out, (1, 256), "e5m6")
    with pytest.raises(ValueError, match="x_special_fmt"):
        tk1.quant.cast_back((q, sf), out, (1, 256), "e3m2")
    with pytest.raises(TypeError, match="uint8"):
        tk1.quant.cast_back((q.view(torch.int8), sf), out, (1, 256), "e5m6")
    with pytest.raises(TypeError, match="x_special_fmt='e5m6'"):
        tk1.quant.cast_back((q, sf), out, (1, 256))
    with pytest.raises(TypeError, match="QuantTensor"):
        tk.quant.cast_back(x, out, (1, 256))


def test_what_the_releases_refuse_is_an_argument_error():
    """Inputs TileKernels itself asserts against are TypeErrors naming the argument, not NotImplementedError:
    per_block_cast_with_precomputed_sf reads row-major float32 scales only (operators-v1.md 1.3, kept in 2.1.0),
    per_channel_cast's quantized input holds e4m3 codes (operators-v2.md 2.13), a quantized input is a (codes,
    scales) pair of e4m3 or FP4 codes (1.1)."""
    x = edgy(128, 256)
    q, sf = tk.quant.per_block_cast(x, "e4m3", (128, 128), round_sf=True)
    packed = tk.quant.per_block_cast(x, "e4m3", (128, 128), round_sf=True, use_packed_ue8m0=True)[1]
    for module in (tk, tk1):
        bits_equal(module.quant.per_block_cast_with_precomputed_sf(x, "e4m3", (128, 128), sf), q)
        with pytest.raises(TypeError, match="`sf` must have dtype torch.float32"):
            module.quant.per_block_cast_with_precomputed_sf(x, "e4m3", (128, 128), packed)
    pq, psf = tk.quant.per_token_cast(x, "e4m3", 128)
    with pytest.raises(TypeError, match="float8_e4m3fn codes"):
        tk.quant.per_channel_cast((pq.view(torch.float8_e5m2), psf), "e4m3", 128)
    with pytest.raises(TypeError, match="QuantTensor"):
        tk.quant.per_token_cast(x, "e4m3", 128, (1, 128))


# --- per_block_cast_lossless from input blocks of several rows, wider or narrower than 32 channels ---------------

@pytest.mark.parametrize("in_block, out_block, packed_in, col", [
    ((32, 32), (128, 128), False, False), ((128, 64), (128, 128), True, True), ((1, 64), (1, 128), False, True),
    ((32, 128), (32, 128), True, False),
    ((1, 16), (1, 32), False, False), ((32, 16), (128, 128), True, True), ((2, 8), (32, 32), False, False),
])
def test_per_block_cast_lossless_of_wider_input_blocks(in_block, out_block, packed_in, col):
    """operators-v1.md 1.7 (kept in 2.1.0): per output block, E_out = max(0, the largest biased exponent e_in of
    the input scale blocks it covers (inside the tensor) - 6); out = e4m3(q * 2^(e_in - E_out)), out_sf =
    2^(E_out - 127); out_block a multiple of x_block in both dims."""
    rows, h = 200, 256
    g = torch.Generator().manual_seed(in_block[0] + in_block[1])
    q = torch.randint(-128, 128, (rows, h // 2), generator=g, dtype=torch.int8)
    nbm, nbk = -(-rows // in_block[0]), h // in_block[1]
    e_in = torch.randint(120, 131, (nbm, nbk), generator=g, dtype=torch.int32)
    if packed_in:
        b = torch.nn.functional.pad(e_in.to(torch.uint8), (0, -nbk % 4))
        sf_in = b.contiguous().view(torch.int32)
    else:
        sf_in = (e_in << 23).view(torch.float32)
    e_el = e_in.repeat_interleave(in_block[0], 0)[:rows].repeat_interleave(in_block[1], 1)
    e_out = torch.empty(-(-rows // out_block[0]), h // out_block[1], dtype=torch.int32)
    for i in range(e_out.shape[0]):
        for j in range(e_out.shape[1]):
            blk = e_el[i * out_block[0]:(i + 1) * out_block[0], j * out_block[1]:(j + 1) * out_block[1]]
            e_out[i, j] = max(int(blk.max()) - 6, 0)
    e_out_el = e_out.repeat_interleave(out_block[0], 0)[:rows].repeat_interleave(out_block[1], 1)
    mult = ((e_el - e_out_el + 127) << 23).view(torch.float32)
    want_q, want_sf = to_e4m3(decode_e2m1(q) * mult), (e_out << 23).view(torch.float32)
    for module in (tk, tk1):
        got_q, got_sf = module.quant.per_block_cast_lossless((q, sf_in), "e4m3", in_block, out_block, col)
        bits_equal(got_q, want_q)
        assert not col or got_sf.stride(0) == 1
        bits_equal(got_sf.contiguous(), want_sf)
    with pytest.raises(ValueError, match="multiple of x_block_size"):
        tk.quant.per_block_cast_lossless((q, sf_in), "e4m3", in_block, (out_block[0], in_block[1] * 3 // 2))
    with pytest.raises(ValueError, match="'e4m3'"):
        tk.quant.per_block_cast_lossless((q, sf_in), "e2m1", in_block, out_block)


# --- 2.1.0's per_token_cast of a quantized input with stochastic_cast ------------------------------------------------

@pytest.mark.parametrize("in_fmt, npc, block, flags", [
    ("e4m3", 128, (128, 128), (False, True, False, False)),
    ("e4m3", 32, (32, 32), (True, True, True, False)),
    ("e2m1", 128, (1, 32), (False, False, False, True)),
    ("e4m3", 128, (1, 64), (False, False, False, False)),
])
def test_per_token_cast_of_a_quantized_input_stochastic(in_fmt, npc, block, flags):
    """operators-v2.md 2.9: the scales of the round-to-nearest re-quantization (1.1: v = q * (sf_in * sf_inv)),
    and v rounded to e4m3 by the hash of each quad of scaled float32 values and its column-quad index inside the
    row (the stochastic-rounding oracle of tests/test_stochastic_cast.py, written from the same text)."""
    from test_stochastic_cast import oracle_random_bits, oracle_round
    import numpy as np
    col, round_sf, packed, e4m3_sf = flags
    rows = 40
    q, sf_in = quantized_input(in_fmt, rows, block, packed, seed=npc + block[1])
    qf = decode_e2m1(q) if in_fmt == "e2m1" else q.float()
    s = sf_in
    if packed:
        s = (sf_in.contiguous().view(torch.uint8)[:, :384 // block[1]].int() << 23).view(torch.float32)
    s = s.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)
    amax = (qf * s).abs().view(rows, -1, npc).amax(-1)
    if e4m3_sf:
        want_sf, inv = e4m3_scale_pair(amax, E4M3_MAX)
    else:
        want_sf, inv = sf_and_inv(amax, 1e-4, round_sf)
    v = (qf * (s * inv.repeat_interleave(npc, 1))).reshape(-1, 4).numpy()
    quad = np.arange(len(v), dtype=np.int64) % (384 // 4)
    want_q = oracle_round(v, oracle_random_bits(v.view(np.uint32), "e4m3", quad), "e4m3").reshape(rows, 384)
    got_q, got_sf = tk.quant.per_token_cast((q, sf_in), "e4m3", npc, block, col, round_sf, packed, e4m3_sf,
                                            stochastic_cast=True)
    bits_equal(got_q, want_q)
    rne = tk.quant.per_token_cast((q, sf_in), "e4m3", npc, block, col, round_sf, packed, e4m3_sf)
    assert got_sf.stride() == rne[1].stride()
    bits_equal(got_sf.contiguous(), rne[1].contiguous())
    if not packed:
        bits_equal(got_sf.contiguous(), want_sf)
    assert not torch.equal(got_q.view(torch.uint8), rne[0].view(torch.uint8))     # it does round otherwise


# --- 2.1.0's swiglu_backward(..., do_recompute=True) -----------------------------------------------------------------

@pytest.mark.parametrize("dtype, fmt", [(torch.bfloat16, "bf16"), (torch.float32, "fp32")])
@pytest.mark.parametrize("weighted, clamp", [(False, None), (True, 0.5), (True, None)])
@pytest.mark.parametrize("layout", [False, True])
def test_swiglu_backward_do_recompute(dtype, fmt, weighted, clamp, layout):
    """operators-v2.md 2.8: with do_recompute the result ends with act_out = a / (1 + exp(-a)) * b * w in the x
    dtype (a, b clamped at c first, w = topk_weights[row] * rsf or 1), zero on the psum layout's padding rows;
    the fields before it are those of the same call without it."""
    counts, alignment = [5, 0, 17, 3], 16
    psum, valid, tail = psum_layout(counts, alignment, extra_rows=2)
    rows, h, rsf = valid.shape[0], 128, 2.5
    x, w = swiglu_inputs(rows, h, valid | tail, 7)
    x = x.to(dtype)
    grad = torch.randn(rows, h, generator=torch.Generator().manual_seed(3)).to(dtype)
    weights = w if weighted else None
    args = (psum if layout else None, weights, rsf if weighted else None, clamp)
    tk.set_token_alignment(alignment)
    try:
        got = tk.quant.swiglu_backward(x, grad, fmt, *args, do_recompute=True)
        without = tk.quant.swiglu_backward(x, grad, fmt, *args)
    finally:
        tk.reset_runtime_config()
    assert len(got) == len(without) + 1
    for t, u in zip(got, without):
        bits_equal(t, u)
    a, b = x[:, :h].float(), x[:, h:].float()
    if clamp is not None:
        a, b = a.clamp(max=clamp), b.clamp(-clamp, clamp)
    act = a / (1 + expf(-a)) * b
    if weighted:
        act = act * (w * rsf)[:, None]
    want = act.to(dtype)
    if layout:
        want[~(valid | tail)] = 0
    bits_equal(got[-1], want)         # +0.0 on padding rows, bit for bit


# --- 2.1.0's norm_forward_and_per_token_cast(..., with_out_bf16=True / out_bf16=...) -------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("residual, weighted, out_scale, round_sf", [(False, True, 1.0, False),
                                                                    (True, True, 0.3, True), (True, False, 1.0, True)])
@pytest.mark.parametrize("given", [False, True])
def test_norm_forward_and_per_token_cast_out_bf16(dtype, residual, weighted, out_scale, round_sf, given):
    """operators-v2.md 2.5: s = x (+ residual, rounded to x's dtype), rstd = rsqrt(mean(s^2) + eps), y = s * rstd *
    (w * out_scale) rounded to x's dtype; q, sf = the per-token cast of y in groups of 32; with_out_bf16 also gives
    bf16(y) (y itself for bf16 x). y is computed here from the kernel's rstd (checked against a float64 one to
    2e-6), then out_bf16, q and sf bit for bit; out_bf16= given is written and returned."""
    rows, h, eps = 24, 256, 1e-6
    x = edgy(rows, h, dtype, seed=11)
    x[0] = 0.0
    g = torch.Generator().manual_seed(12)
    r = torch.randn(rows, h, generator=g).to(dtype) if residual else None
    w = (torch.randn(h, generator=g) + 1).to(dtype) if weighted else None
    buf = torch.full((rows, h), 7.0, dtype=torch.bfloat16) if given else None
    (q, sf), out_bf16, rstd, norm_input = tk.quant.norm_forward_and_per_token_cast(
        x, w, eps, "e4m3", 32, r, out_scale, round_sf=round_sf, with_out_bf16=not given, out_bf16=buf, with_rstd=True)
    (q0, sf0), none, _, _ = tk.quant.norm_forward_and_per_token_cast(x, w, eps, "e4m3", 32, r, out_scale,
                                                                     round_sf=round_sf)
    assert none is None and (not given or out_bf16 is buf)
    s = x.float() if r is None else (x.float() + r.float()).to(dtype).float()
    bits_equal(norm_input, s.to(dtype))
    want_rstd = torch.rsqrt(s.double().square().sum(1) / h + eps)
    torch.testing.assert_close(rstd.double(), want_rstd, rtol=2e-6, atol=0.0)
    wf = torch.ones(h) if w is None else w.float()
    y = (s * rstd[:, None] * (wf * out_scale)).to(dtype).float()
    bits_equal(out_bf16, y.bfloat16())
    groups = y.view(rows, -1, 32)
    want_sf, inv = sf_and_inv(groups.abs().amax(-1), 1e-4, round_sf)
    bits_equal(sf, want_sf)
    bits_equal(q, to_e4m3(groups * inv[..., None]).view(rows, h))
    bits_equal(q0, q)
    bits_equal(sf0, sf)


# --- unpack_from_e2m1fn_x2 into float16 and float8 out dtypes (both releases) ---------------------------------------

@pytest.mark.parametrize("module", [tk, tk1], ids=["2.1.0", "1.0"])
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_unpack_from_e2m1fn_x2_into_float16_and_float8(module, out_dtype):
    """operators-v1.md 1.11 (unchanged in 2.1.0): byte i of (..., L) gives elements 2i (low nibble) and 2i + 1 (high
    nibble) of (..., 2L); a nibble is sign (bit 3), 2 exponent bits with bias 1 and 1 mantissa bit (e = 0: m * 0.5).
    Every such value is an fp16, e4m3 and e5m2 value, so the decode in out_dtype is exact: every byte, -0.0 included."""
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(2, 2, 64)
    want = decode_e2m1(x).to(out_dtype)            # the nibble decode above (operators-v1.md 0.2)
    y = module.quant.unpack_from_e2m1fn_x2(x, out_dtype)
    bits_equal(y, want)
    assert y[0, 0, 16] == 0 and torch.signbit(y[0, 0, 16].float())     # byte 8, low nibble 0x8: -0.0
    bits_equal(module.quant.unpack_from_e2m1fn_x2(x.view(torch.int8)[..., :0], out_dtype),
               torch.empty(2, 2, 0, dtype=out_dtype))


# --- 2.1.0's per_channel_cast of packed UE8M0 input scales without num_per_channels; of a plain one with it -------

def ue8m0_words_to_scales(sf, groups):
    """Packed UE8M0 int32 words [T, ceil(groups / 4)] (scale g in byte g % 4 of word g // 4) as float32 2^(e - 127)
    [T, groups]."""
    e = sf.contiguous().view(torch.uint8)[:, :groups].to(torch.int32)
    return (e << 23).view(torch.float32)


@pytest.mark.parametrize("npc, h, rows, npt, round_sf, packed_out", [
    (32, 384, 96, 32, True, False), (128, 640, 160, 128, False, False), (128, 640, 160, 32, True, True)])
def test_per_channel_cast_of_packed_ue8m0_input_scales_without_num_per_channels(npc, h, rows, npt, round_sf,
                                                                              packed_out):
    """operators-v2.md 2.13: a (q e4m3, sf) input with per-token scales in groups of npc ∈ {32, 128} channels; v =
    q * sf_in, per channel and block of npt rows the amax, its floor and scale, out = e4m3(v * sf_inv). With packed
    UE8M0 input scales and no num_per_channels the group is the one whose word count ceil(H / npc / 4) the scales
    have (H = 640 in groups of 128: 5 scales in 2 words, the last padded); where both 32 and 128 fit (H = 128) it
    must be given (ValueError). A plain input with num_per_channels gives the result of the call without it."""
    x = edgy(rows, h, seed=npc + rows)
    x[7, :5] = torch.tensor([448.0, -448.0, 3e38, -3e38, 1e-38])
    q, sf = tk.quant.per_token_cast(x, "e4m3", npc, round_sf=True, use_packed_ue8m0=True)
    assert sf.dtype == torch.int32 and sf.shape[1] == -(-h // npc // 4)
    got = tk.quant.per_channel_cast((q, sf), "e4m3", npt, round_sf, None, packed_out)
    given = tk.quant.per_channel_cast((q, sf), "e4m3", npt, round_sf, npc, packed_out)
    bits_equal(got[0], given[0])
    bits_equal(got[1], given[1])
    v = q.float() * ue8m0_words_to_scales(sf, h // npc).repeat_interleave(npc, dim=1)
    want_out, want_sf = per_channel_fused_model(v, None, torch.arange(rows, dtype=torch.int32), npt, round_sf)
    bits_equal(got[0], want_out)
    if packed_out:
        groups = -(-rows // npt)
        got_sf = got[1].contiguous().view(torch.uint8).view(-(-groups // 4), h, 4).permute(0, 2, 1).reshape(-1, h)
        bits_equal(got_sf[:groups], ((want_sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8))
    else:
        bits_equal(got[1], want_sf)
    plain = tk.quant.per_channel_cast(x, "e4m3", npt, round_sf, None, packed_out)
    with_npc = tk.quant.per_channel_cast(x, "e4m3", npt, round_sf, npc, packed_out)
    bits_equal(with_npc[0], plain[0])
    bits_equal(with_npc[1], plain[1])
    if npc == 32 and not packed_out and round_sf:
        q1, sf1 = tk.quant.per_token_cast(x[:, :128].contiguous(), "e4m3", 128, round_sf=True, use_packed_ue8m0=True)
        with pytest.raises(ValueError, match="num_per_channels"):
            tk.quant.per_channel_cast((q1, sf1), "e4m3", npt, round_sf)


# --- 2.1.0's swiglu_backward: da's factor rounded once, and x_grad in any fmt ----------------------------------------

def swiglu_grad_model(x, g, w, rsf, c, fused):
    """operators-v2.md 2.8 in float32, each operation rounded once: a, b the halves of x, flagged before the
    clamp; t = 1 + exp(-a) (libm's expf); s = 1 / t; gws = (g * (w * rsf)) * s (w = 1 without weights);
    da = (gws * b) * f, f = 1 + a * (1 - s) with the product and the sum rounded apart, or with `fused`
    rounded once: the exact product plus 1 in float64, then float32 (what the C target's fma computes);
    db = gws * a; act_out = ((a / t) * b) * (w * rsf); weight_grad = rsf * sum(g * (a / t) * b) in float64.
    Returns float32 [da | db], act_out and weight_grad."""
    h = x.shape[1] // 2
    a0, b0 = x[:, :h].float(), x[:, h:].float()
    a, b = (a0, b0) if c is None else (a0.clamp(max=c), b0.clamp(-c, c))
    ww = (torch.ones(x.shape[0]) if w is None else w) * rsf
    t = 1 + expf(-a)
    s = 1 / t
    gws = g.float() * ww[:, None] * s
    if fused:
        f = (a.double() * (1 - s).double() + 1).float()
    else:
        f = 1 + a * (1 - s)
    da, db = gws * b * f, gws * a
    if c is not None:
        da = torch.where(a0 > c, 0.0, da)
        db = torch.where((b0 > c) | (b0 < -c), 0.0, db)
    act = a / t * b
    return torch.cat([da, db], 1), act * ww[:, None], (g.double() * act.double()).sum(1) * rsf


@pytest.mark.parametrize("clamp", [None, 0.5])
def test_swiglu_backward_da_rounded_once(clamp):
    """operators-v2.md 2.8: 2.1.0 rounds da's factor 1 + a * (1 - s) once (a fused multiply-add), so the compat
    swiglu_backward passes da_fma=True. On gates drawn where the two roundings often part (around the factor's
    root a ~ -1.28, and spread over [-8, 8]) its float32 x_grad is the once-rounded model's bit for bit, tkgen's
    own op (da_fma=False by default) the twice-rounded model's; the two differ in da only, on many elements."""
    rows, h, rsf = 16, 256, 2.5
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(rows, h, generator=gen) * 0.05 - 1.28
    a[rows // 2:] = torch.rand(rows // 2, h, generator=gen) * 16 - 8
    b = torch.randn(rows, h, generator=gen)
    x = torch.cat([a, b], 1)
    g = torch.randn(rows, h, generator=gen)
    w = torch.rand(rows, generator=gen) + 0.5
    got = tk.quant.swiglu_backward(x, g, "fp32", None, w, rsf, clamp)
    plain = ops.swiglu_backward(x, g, weights=w, routed_scaling_factor=rsf, clamp=clamp)[0]
    once, _, _ = swiglu_grad_model(x, g, w, rsf, clamp, fused=True)
    twice, _, _ = swiglu_grad_model(x, g, w, rsf, clamp, fused=False)
    bits_equal(got[0], once)
    bits_equal(plain, twice)
    differ = got[0].view(torch.int32) != plain.view(torch.int32)
    assert not differ[:, h:].any()
    assert torch.equal(differ, once.view(torch.int32) != twice.view(torch.int32))
    assert differ[:, :h].sum() > rows * h // 50, differ.sum()
    assert differ[rows // 2:, :h].any()


@pytest.mark.parametrize("dtype, fmt", [(torch.bfloat16, "fp32"), (torch.float32, "bf16"),
                                        (torch.bfloat16, "bf16"), (torch.float32, "fp32")])
@pytest.mark.parametrize("weighted, clamp, layout", [(True, 10.0, False), (False, None, True)])
def test_swiglu_backward_x_grad_format(dtype, fmt, weighted, clamp, layout):
    check_x_grad_format(tk.quant.swiglu_backward, dtype, fmt, weighted, clamp, layout)


@pytest.mark.parametrize("dtype, fmt, weighted, clamp, layout", [(torch.bfloat16, "fp32", True, 10.0, False),
                                                                 (torch.float32, "bf16", False, None, True)])
def test_swiglu_backward_and_per_token_cast_plain_path(dtype, fmt, weighted, clamp, layout):
    """2.1.0 takes fmt 'bf16' and 'fp32' through swiglu_backward_and_per_token_cast too: a plain x, no cast,
    swiglu_backward's results (the same model as below); other formats are refused by name."""
    def call(x, g, fmt, psum, w, rsf, clamp, do_recompute):
        return tk.quant.swiglu_backward_and_per_token_cast(x, g, fmt, None, psum, w, rsf, clamp_value=clamp,
                                                          do_recompute=do_recompute)
    check_x_grad_format(call, dtype, fmt, weighted, clamp, layout)
    with pytest.raises(ValueError, match="fmt.*'e4m3', 'bf16' or 'fp32'"):
        tk.quant.swiglu_backward_and_per_token_cast(torch.zeros(4, 128), torch.zeros(4, 64), "e5m2", 32)


def check_x_grad_format(call, dtype, fmt, weighted, clamp, layout):
    """operators-v2.md 2.8: x_grad and act_out come in `fmt` ('bf16' or 'fp32') from bf16 and fp32 inputs alike,
    the float32 value rounded once to nearest even (bf16 overflowing to inf), zero on the psum layout's padding
    rows; da's factor is rounded once. Rows of signed zeros, tiny values, gates whose exp overflows (s = 0) and
    a row whose gradients straddle the float32 maximum (some inf, some not). weight_grad, a float32 sum in the
    kernel's order, within rtol 1e-4 of the float64 sum, on the rows where it stays finite."""
    counts, alignment = [6, 0, 10], 8
    psum, valid, tail = psum_layout(counts, alignment, extra_rows=3)
    rows, h = valid.shape[0], 128
    rsf = 2.5 if weighted else None
    gen = torch.Generator().manual_seed(17)
    x = torch.randn(rows, 2 * h, generator=gen) * 3
    g = torch.randn(rows, h, generator=gen)
    x[0] = -0.0
    x[2, 1::4] = 0.0
    x[3] = torch.randn(2 * h, generator=gen) * 1e-32
    x[4, :h] = -(torch.rand(h, generator=gen) + 1) * 1e38        # exp(-a) overflows: s = 0
    x[5, :h], x[5, h:] = 6.0, 1.0                                  # da = g * w * s * (1 + 6 * (1 - s)), > g
    g[5] = torch.linspace(3.3e38, 3.4e38, h) * (1 - 2 * (torch.arange(h) % 3 == 0).float())
    g[7, 1::2] = -0.0
    w = torch.rand(rows, generator=gen) + 0.5 if weighted else None
    if weighted:
        w[5] = 0.4                                                 # w * rsf = 1
    x, g = x.to(dtype), g.to(dtype)
    tk.set_token_alignment(alignment)
    try:
        got = call(x, g, fmt, psum if layout else None, w, rsf, clamp, do_recompute=True)
    finally:
        tk.reset_runtime_config()
    dx, act, wg = swiglu_grad_model(x, g, w, 1.0 if rsf is None else rsf, clamp, fused=True)
    out = {"fp32": torch.float32, "bf16": torch.bfloat16}[fmt]
    dx, act = dx.to(out), act.to(out)
    if layout:
        pad = ~(valid | tail)
        assert pad.any()
        dx[pad], act[pad] = 0.0, 0.0
    assert len(got) == (3 if weighted else 2)
    bits_equal(got[0], dx)
    bits_equal(got[-1], act)
    assert got[0][5].isinf().any() and got[0][5].isfinite().any()
    if weighted:
        keep = torch.arange(rows) != 5
        torch.testing.assert_close(got[1][keep], wg.float()[keep], rtol=1e-4, atol=1e-4)
