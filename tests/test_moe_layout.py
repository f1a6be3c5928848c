"""The expanded (expert-major) layout ops against plain-PyTorch oracles written independently of the specs:
rows gathered and scattered at the positions of a real mapping, and TileKernels' argument conventions."""
import pytest
import torch

import tkgen.compat.tilekernels_v1 as tk
import tkgen.ops as ops


def mapping(topk_idx: torch.Tensor, num_experts: int, alignment: int):
    """token_topk_to_pos and pos_to_expert of an expert-major layout: each expert's pairs in token order,
    its segment padded to a multiple of `alignment` (padding rows -1)."""
    T, K = topk_idx.shape
    counts = [int((topk_idx == e).sum()) for e in range(num_experts)]
    sizes = [-(-c // alignment) * alignment for c in counts]
    start = [sum(sizes[:e]) for e in range(num_experts)]
    pos = torch.full((T, K), -1, dtype=torch.int32)
    pos_to_expert = torch.full((sum(sizes),), -1, dtype=torch.int32)
    fill = list(start)
    for t in range(T):
        for k in range(K):
            e = int(topk_idx[t, k])
            if e >= 0:
                pos[t, k] = fill[e]
                pos_to_expert[fill[e]] = e
                fill[e] += 1
    return pos, pos_to_expert


def routed(T, K, E, seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int64)
    idx[torch.rand(T, K, generator=g) < 0.1] = -1          # some pairs not routed
    return idx, g


def fma_fold(rows, weights):
    """acc = fma(row_k, w_k, acc) from 0, each step the exact product plus acc rounded once to float32
    (through float64: what the C target computes, see docs/numerics.md)."""
    acc = torch.zeros(rows.shape[1:], dtype=torch.float32)
    for r, w in zip(rows, weights):
        acc = (r.double() * w.double() + acc.double()).float()
    return acc


@pytest.mark.parametrize("T,K,E,H,align", [(7, 2, 4, 64, 1), (13, 6, 16, 96, 16), (1, 1, 3, 1, 4)])
def test_expand_then_reduce(T, K, E, H, align):
    idx, g = routed(T, K, E, T * 31 + H)
    pos, pos_to_expert = mapping(idx, E, align)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    out = ops.expand_to_fused(x, pos, pos_to_expert)
    assert out.shape == (pos_to_expert.numel(), H)
    want = torch.zeros_like(out)
    for t in range(T):
        for k in range(K):
            if pos[t, k] >= 0:
                want[pos[t, k]] = x[t]
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    assert not out[pos_to_expert < 0].any()

    w = torch.rand(T, K, generator=g)
    y = torch.randn(out.shape, generator=g)                       # the experts' outputs, float32
    got = ops.reduce_fused(y, pos, topk_weights=w, out_format="fp32")
    for t in range(T):
        ks = [k for k in range(K) if pos[t, k] >= 0]
        ref = fma_fold(y[pos[t, ks].long()], w[t, ks]) if ks else torch.zeros(H)
        assert torch.equal(got[t].view(torch.int32), ref.view(torch.int32)), t


def test_reduce_fused_scales_and_fp8():
    T, K, E, H = 9, 4, 8, 256
    idx, g = routed(T, K, E, 5)
    pos, pos_to_expert = mapping(idx, E, 8)
    x = torch.randn(pos_to_expert.numel(), H, generator=g).to(torch.bfloat16)
    x_sf = torch.rand(pos_to_expert.numel(), generator=g) + 0.5
    w = torch.rand(T, K, generator=g)
    sf = torch.tensor([0.75])
    got = tk.moe.reduce_fused((x, x_sf), w, pos, fp8_format="e4m3", sf=sf)
    assert got.dtype == torch.float8_e4m3fn
    for t in range(T):
        ks = [k for k in range(K) if pos[t, k] >= 0]
        p = pos[t, ks].long()
        ref = fma_fold(x[p].float(), (w[t, ks] * x_sf[p])) * sf
        ref = ref.clamp(-448, 448).to(torch.float8_e4m3fn)
        assert torch.equal(got[t].view(torch.uint8), ref.view(torch.uint8)), t
    with pytest.raises(ValueError, match="`sf` is given only with an FP8 output"):
        tk.moe.reduce_fused(x, w, pos, sf=sf)                    # sf only with an FP8 output
    into = torch.empty(T, H, dtype=torch.bfloat16)
    assert tk.moe.reduce_fused(x, None, pos, out=into) is into


@pytest.mark.parametrize("col, packed", [(False, False), (True, False), (True, True)])
def test_expand_with_scales(col, packed):
    """operators-v1.md 4.3: the scale rows copied alongside the codes, zero on padding rows; row-major, or
    column-major TMA-aligned (storage [S, align(T_exp, 4)], returned transposed), float32 or packed UE8M0."""
    T, K, E, H = 6, 2, 4, 128
    idx, g = routed(T, K, E, 3)
    pos, pos_to_expert = mapping(idx, E, 4)
    q = torch.randn(T, H, generator=g).to(torch.float8_e4m3fn)
    if packed:
        sf = torch.randint(-2 ** 31, 2 ** 31 - 1, (T, 1), generator=g, dtype=torch.int32)
    else:
        sf = torch.rand(T, H // 32, generator=g)
    out, out_sf = tk.moe.expand_to_fused_with_sf((q, sf), 32, pos, pos_to_expert, use_tma_aligned_col_major_sf=col)
    rows = pos_to_expert.shape[0]
    assert out_sf.shape == (rows, sf.shape[1]) and out_sf.dtype == sf.dtype
    assert out_sf.stride() == ((1, -(-rows // 4) * 4) if col else (sf.shape[1], 1))
    for t in range(T):
        for k in range(K):
            if pos[t, k] >= 0:
                assert torch.equal(out[pos[t, k]].view(torch.uint8), q[t].view(torch.uint8))
                assert torch.equal(out_sf[pos[t, k]], sf[t])
    pad = pos_to_expert < 0
    assert pad.any() and not out[pad].view(torch.uint8).any() and not out_sf[pad].any()


def test_inplace_unique_group_indices_against_a_sort_free_oracle():
    g = torch.Generator().manual_seed(9)
    idx = torch.randint(-1, 8, (37, 8), generator=g)
    want = idx.clone()
    for row in want:
        seen = set()
        for k in range(row.numel()):
            v = int(row[k])
            if v >= 0 and v in seen:
                row[k] = -1
            elif v >= 0:
                seen.add(v)
    got = idx.clone()
    assert tk.moe.inplace_unique_group_indices(got, 8) is None
    assert torch.equal(got, want)
