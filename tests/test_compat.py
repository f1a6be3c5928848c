"""tkgen.compat.tilekernels (2.1.0) and tkgen.compat.tilekernels_v1: each mapped function called as
TileKernels' own tests call it (their shapes, made small for the CPU; operators-v1.md and -v2.md), against
the tkgen op it maps to: the same bits, dtypes, shapes and strides (TileKernels' assert_equal), the
same return structure and in-place behaviour; every name of each release's modules is there, and what
tkgen has not built raises NotImplementedError naming it."""
import pytest
import torch

import tkgen.compat.tilekernels as tk
import tkgen.compat.tilekernels_v1 as tk1
import tkgen.ops as ops
from tkgen.testing.check import compare

T, H = 33, 512
g = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, generator=g).to(dtype)


def same(got, want):
    """TileKernels' assert_equal: dtype, shape, strides (unless empty) and bytes."""
    if isinstance(want, (tuple, list)):
        assert type(got) is tuple and len(got) == len(want)
        for a, b in zip(got, want):
            same(a, b)
        return
    if want is None:
        assert got is None
        return
    strides = lambda t: [st for st, n in zip(t.stride(), t.shape) if n > 1]  # noqa: E731  (a size-1 dim has any)
    assert strides(got) == strides(want) or got.numel() == 0, (got.stride(), want.stride())
    compare("out", got, want, "bytes")


def col(sf):
    """The TMA-aligned column-major layout: strides (1, rows padded to 16 bytes)."""
    assert sf.stride(0) == 1 and sf.stride(1) == -(-sf.shape[0] // (16 // sf.element_size())) * (16 // sf.element_size())
    return sf.contiguous()


# TileKernels' layout flags (use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0) and tkgen's scales
LAYOUTS = [((False, True, False), "pow2", "row"), ((True, True, True), "ue8m0", "col"),
           ((False, False, False), "fp32", "row")]


@pytest.mark.parametrize("flags, scale, layout", LAYOUTS)
@pytest.mark.parametrize("fmt, npc", [("e4m3", 32), ("e4m3", 128), ("e4m3", H), ("e2m1", 32)])
def test_per_token_cast(flags, scale, layout, fmt, npc):
    x = randn(T, H)
    q, sf = tk.quant.per_token_cast(x, fmt, npc, None, *flags)
    same((q, sf), ops.per_token_cast(x, fmt, npc, scale, layout))
    same(tk1.quant.per_token_cast(x, fmt, npc, None, *flags), (q, sf))
    sf_only = tk.quant.per_token_cast_with_sf_only(x, fmt, npc, *flags)
    same(sf_only.contiguous(), ops.per_token_cast_with_sf_only(x, fmt, npc, scale))
    if layout == "col":
        col(sf_only)
    if fmt == "e4m3" and scale != "ue8m0":
        want = ops.per_token_cast_with_precomputed_sf(x, sf.contiguous(), fmt, npc)
        same(tk.quant.per_token_cast_with_precomputed_sf(x, fmt, npc, sf), want)
        out = torch.empty_like(want)
        assert tk.quant.per_token_cast_with_precomputed_sf(x, fmt, npc, sf, out=out) is out and torch.equal(
            out.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize("fmt, npc", [("e4m3", 128), ("e4m3", 32), ("e2m1", 32)])
def test_e4m3_scales(fmt, npc):
    """use_e4m3_sf: tkgen's scale="e4m3" (float8_e4m3fn scales), in every op whose 2.1.0 signature has it;
    cast_back tells e4m3 input scales by their dtype."""
    x = randn(T, H)
    q, sf = tk.quant.per_token_cast(x, fmt, npc, use_e4m3_sf=True)
    same((q, sf), ops.per_token_cast(x, fmt, npc, "e4m3"))
    assert sf.dtype == torch.float8_e4m3fn
    same(tk.quant.per_token_cast_with_sf_only(x, fmt, npc, use_e4m3_sf=True), sf)
    same(tk.quant.cast_back((q, sf), "fp32", (1, npc)), ops.cast_back(q, sf, fmt, npc, "e4m3", "fp32"))
    y = x.clone()
    tk.quant.per_token_cast_and_cast_back(y, fmt, npc, use_e4m3_sf=True)
    same(y, ops.per_token_cast_and_cast_back(x, fmt, npc, "e4m3", "bf16"))
    with pytest.raises(ValueError, match="`use_e4m3_sf` is incompatible with round_sf"):
        tk.quant.per_token_cast(x, fmt, npc, round_sf=True, use_e4m3_sf=True)


@pytest.mark.parametrize("flags, scale, layout", LAYOUTS)
def test_out_is_written_by_the_kernel(flags, scale, layout):
    """out=: the kernel stores into the given tensors (no copy), which are returned; tensors laid out
    otherwise than tkgen allocates them are refused."""
    x = randn(T, H)
    want = ops.per_token_cast(x, "e4m3", 128, scale, layout)
    out = ops.per_token_cast(torch.zeros_like(x), "e4m3", 128, scale, layout)     # buffers of that layout
    got = tk.quant.per_token_cast(x, "e4m3", 128, None, *flags, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    same(got, want)
    sf_only = torch.empty_like(want[1].contiguous())
    if layout == "row":
        assert tk.quant.per_token_cast_with_sf_only(x, "e4m3", 128, *flags, out_sf=sf_only) is sf_only
        same(sf_only, want[1])
        pre = torch.empty_like(want[0])
        if scale == "fp32":
            assert tk.quant.per_token_cast_with_precomputed_sf(x, "e4m3", 128, want[1], out=pre) is pre
            same(pre, ops.per_token_cast_with_precomputed_sf(x, want[1], "e4m3", 128))
        q, sf = ops.per_block_cast(x, "e4m3", 32, 32, scale)
        out = (torch.empty_like(q), torch.empty_like(sf))
        assert tk.quant.per_block_cast(x, "e4m3", (32, 32), *flags, out=out)[1] is out[1]
        same(out, (q, sf))
    with pytest.raises(ValueError, match="an `out` tensor must be"):
        tk.quant.per_token_cast(x, "e4m3", 128, None, *flags, out=(want[0].bfloat16(), want[1]))


@pytest.mark.parametrize("fmt, scale_flags, scale", [("e4m3", (False, False, False), "fp32"),
                                                      ("e4m3", (True, True, True), "ue8m0"),
                                                      ("e2m1", (True, True, True), "ue8m0")])
@pytest.mark.parametrize("out", ["bf16", "fp32"])
def test_cast_back_per_token(fmt, scale_flags, scale, out):
    x = randn(T, H)
    q, sf = tk.quant.per_token_cast(x, fmt, 128, None, *scale_flags)
    want = ops.cast_back(q, sf.contiguous(), fmt, 128, scale, out)
    same(tk.quant.cast_back((q, sf), out, (1, 128)), want)
    same(tk.quant.per_token_cast_back((q, sf), out, 128), want)
    same(tk1.quant.cast_back((q, sf), out, (1, 128)), want)


@pytest.mark.parametrize("block", [(128, 128), (128, 1)])
def test_cast_back_per_block(block):
    q = randn(130, 256, dtype=torch.float32).to(torch.float8_e4m3fn)
    sf = torch.rand(2, 256 // block[1], generator=g) + 0.5
    want = ops.cast_back(q, sf, "e4m3", block[1], "fp32", "fp32", block_rows=block[0])
    same(tk.quant.cast_back((q, sf), "fp32", block), want)
    rows = torch.arange(130) // block[0]
    ref = q.float() * sf[rows].repeat_interleave(block[1], dim=1)
    assert torch.equal(want, ref)          # the 2-D scale block is the one TileKernels' cast_back means


def test_per_token_cast_and_cast_back_is_in_place():
    x = randn(T, H)
    want = ops.per_token_cast_and_cast_back(x, "e4m3", 128, "pow2", "bf16")
    y = x.clone()
    assert tk.quant.per_token_cast_and_cast_back(y, "e4m3", 128, round_sf=True) is None
    same(y, want)


@pytest.mark.parametrize("flags, scale, layout", LAYOUTS)
@pytest.mark.parametrize("block", [(128, 128), (32, 32)])
def test_per_block_cast(flags, scale, layout, block):
    x = randn(256, 256)
    q, sf = tk.quant.per_block_cast(x, "e4m3", block, *flags)
    wq, wsf = ops.per_block_cast(x, "e4m3", *block, scale)
    same(q, wq)
    same(col(sf) if layout == "col" else sf, wsf)
    same(tk1.quant.per_block_cast(x, "e4m3", block, *flags), (q, sf))
    sf_only = tk.quant.per_block_cast_with_sf_only(x, "e4m3", block, *flags)
    same(col(sf_only) if layout == "col" else sf_only, ops.per_block_cast_with_sf_only(x, "e4m3", *block, scale))
    if scale == "fp32":
        same(tk.quant.per_block_cast_with_precomputed_sf(x, "e4m3", block, sf),
             ops.per_block_cast_with_precomputed_sf(x, sf, "e4m3", *block))


@pytest.mark.parametrize("out_block", [(1, 128), (32, 32), (128, 128)])
@pytest.mark.parametrize("flags, scale, layout", [((False, True, False), "fp32", "row"), ((True, True, True), "ue8m0", "col")])
def test_per_block_cast_lossless(out_block, flags, scale, layout):
    x = randn(256, 256)
    q4, sf4 = tk.quant.per_token_cast(x, "e2m1", 32, None, *flags)
    got = tk.quant.per_block_cast_lossless((q4, sf4), "e4m3", (1, 32), out_block, *flags)
    same(got, ops.per_block_cast_lossless(q4, sf4.contiguous(), *out_block, 32, "ue8m0" if flags[2] else "fp32",
                                          scale, layout))
    same(tk1.quant.per_block_cast_lossless((q4, sf4), "e4m3", (1, 32), out_block, *flags), got)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("npt", [32, 128])
def test_per_channel_cast_and_transpose(round_sf, npt):
    x = randn(256, H)
    scale = "pow2" if round_sf else "fp32"
    want = ops.per_channel_cast(x, "e4m3", npt, scale)
    same(tk.quant.per_channel_cast(x, "e4m3", npt, round_sf), want)
    same(tk1.quant.per_channel_cast(x, "e4m3", npt, round_sf), want)
    same(tk1.quant.per_channel_cast_fused(x, "e4m3", npt, round_sf), want)
    same(tk1.quant.per_channel_cast_and_transpose(x, "e4m3", npt, round_sf), ops.per_channel_cast(x, "e4m3", npt, scale, True))
    for without in (False, True):
        same(tk1.quant.swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", npt, round_sf, without, 10.0),
             ops.swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", npt, scale, not without, 10.0))


@pytest.mark.parametrize("flags, in_scale, npt, npc, packed", [
    ((False, False, False), "fp32", 128, 128, False), ((True, True, True), "ue8m0", 32, 32, True),
    ((False, False, False), "e4m3", 128, 32, True), ((False, True, False), "fp32", 32, 128, True)])
def test_per_channel_cast_of_a_quantized_input(flags, in_scale, npt, npc, packed):
    """2.1.0's per_channel_cast of (q, sf) from per_token_cast (any of its scale layouts): tkgen's
    per_channel_cast_from_fp8, its scales transposed into TileKernels' float32 [T / npt, H] or col-pack."""
    x = randn(256, H)
    q, sf = tk.quant.per_token_cast(x, "e4m3", npc, None, *flags, use_e4m3_sf=in_scale == "e4m3")
    out, out_sf = ops.per_channel_cast_from_fp8(q, sf.contiguous(), "e4m3", npt, npc, in_scale,
                                                "ue8m0" if packed else "fp32")
    got = tk.quant.per_channel_cast((q, sf), "e4m3", npt, packed, npc, packed)
    same(got, (out, out_sf.T))
    assert got[1].is_contiguous() and got[1].shape == ((256 // npt + 3) // 4 if packed else 256 // npt, H)
    if in_scale != "ue8m0":                                           # npc from the shapes
        same(tk.quant.per_channel_cast((q, sf), "e4m3", npt, packed, None, packed), got)
    if not packed:
        same(tk1.quant.per_channel_cast_fused((q, sf), "e4m3", npt, False, npc), got)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("clamp", [None, 0.5])
def test_swiglu_forward(weighted, clamp):
    x, w = randn(T, 2 * 256), (torch.rand(T, generator=g) if weighted else None)
    rsf = 2.5 if weighted else None
    counts = None if clamp is None else torch.full((4,), 7, dtype=torch.int64)
    out = tk.quant.swiglu_forward(x, "bf16", None, w, rsf, clamp, counts)
    want, want_counts = ops.swiglu_forward(x, weights=w, fmt="bf16", routed_scaling_factor=rsf or 1.0, clamp=clamp)
    same(out, want)
    if clamp is not None:        # added into TileKernels' int64[4]: three clamp counts and the elements seen
        assert counts.tolist() == [7 + int(c) for c in want_counts] + [7 + T * 256]
    q, sf = tk.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128, None, w, rsf, True, True, True, clamp, None)
    wq, wsf, _ = ops.swiglu_forward_and_per_token_cast(x, weights=w, fmt="e4m3", group=128, scale="ue8m0",
                                                      routed_scaling_factor=rsf or 1.0, clamp=clamp)
    same(q, wq)
    same(col(sf), wsf)


def test_swiglu_forward_first_release_moe_options():
    x = randn(T, 2 * 256)
    topk_weights = torch.rand(11, 3, generator=g)
    pos = torch.randint(-1, 33, (T,), generator=g, dtype=torch.int32)
    expert = torch.where(torch.arange(T) % 5 == 0, -1, 1).to(torch.int32)
    counts = torch.zeros(3, dtype=torch.int64)
    q, sf = tk1.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128, pos, topk_weights, expert,
                                                        swiglu_clamp_value=0.5, clamped_count=counts)
    wq, wsf, wc = ops.swiglu_forward_and_per_token_cast(x, pos_to_token_topk=pos, topk_weights=topk_weights,
                                                        pos_to_expert=expert, fmt="e4m3", group=128, clamp=0.5)
    kept = (expert >= 0) & (pos >= 0)                       # padding rows are left as the buffer held them
    same(q[kept], wq[kept])
    same(sf[kept], wsf[kept])
    assert torch.equal(counts, wc)


@pytest.mark.parametrize("weighted", [False, True])
def test_swiglu_backward(weighted):
    x, grad = randn(T, 2 * 256), randn(T, 256)
    w = torch.rand(T, generator=g) if weighted else None
    got = tk.quant.swiglu_backward(x, grad, "bf16", None, w, 2.0 if weighted else None, 10.0)
    xg, wg, _, _ = ops.swiglu_backward(x, grad, weights=w, routed_scaling_factor=2.0 if weighted else 1.0,
                                       clamp=10.0, da_fma=True)
    same(got, (xg, wg) if weighted else (xg,))
    q, sf = ops.per_token_cast(x, "e4m3", 128)
    got = tk.quant.swiglu_backward_and_per_token_cast((q, sf), grad, "e4m3", 128, None, w, None, False, True,
                                                      do_recompute=True)
    xg, fp8, fp8_sf, wg, act = ops.swiglu_backward_and_per_token_cast(q, sf, grad, 128, w, "pow2", recompute=True,
                                                                     da_fma=True)
    same(got, (xg, (fp8, fp8_sf), wg, act) if weighted else (xg, (fp8, fp8_sf), act))


def test_swiglu_backward_first_release_weight_positions():
    tokens, k = 11, 3
    x, grad = randn(T, 2 * 256), randn(T, 256)
    q, sf = ops.per_token_cast(x, "e4m3", 128)
    weight = torch.rand(tokens, k, generator=g)
    pos = torch.randperm(tokens * k, generator=g)[:T].to(torch.int32)
    pos[::7] = -1
    to_pos = torch.full((tokens * k,), -1, dtype=torch.int32)
    to_pos[pos[pos >= 0].long()] = torch.arange(T, dtype=torch.int32)[pos >= 0]
    out, (fp8, fp8_sf), xg, wg = tk1.quant.swiglu_backward_and_per_token_cast((q, sf), grad, weight, pos,
                                                                              to_pos.view(tokens, k), 128)
    rows = torch.where(pos >= 0, weight.reshape(-1)[pos.clamp(min=0).long()], torch.zeros(()))
    w_xg, w_fp8, w_sf, w_wg, w_act = ops.swiglu_backward_and_per_token_cast(q, sf, grad, 128, rows, recompute=True,
                                                                        da_fma=True)
    same((out, fp8, fp8_sf, xg), (w_act, w_fp8, w_sf, w_xg))
    want = torch.zeros(tokens * k)
    want[pos[pos >= 0].long()] = w_wg[pos >= 0]
    assert wg.shape == (tokens, k) and torch.equal(wg.reshape(-1), want)


@pytest.mark.parametrize("with_residual", [False, True])
def test_norm(with_residual):
    x, w = randn(T, H), randn(H)
    r = randn(T, H) if with_residual else None
    out, rstd, norm_input = tk.quant.norm_forward(x, w, 1e-6, residual=r, with_rstd=True)
    wout, wrstd, wres = ops.rmsnorm_forward(x, w, r, 1e-6)
    same((out, rstd, norm_input), (wout, wrstd, wres if with_residual else x))
    assert tk.quant.norm_forward(x, w, 1e-6, residual=r)[1] is None
    (q, sf), bf16, rstd2, _ = tk.quant.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, residual=r,
                                                                       with_rstd=True)
    wq, wsf, wrstd2, _, _ = ops.rmsnorm_forward_and_per_token_cast(x, w, r, 1e-6, 1.0, "e4m3", 32, "fp32")
    same((q, sf, bf16, rstd2), (wq, wsf, None, wrstd2))
    grad = randn(T, H)
    xg, wg = tk.quant.norm_backward(grad, norm_input, w, rstd)
    want_xg, _, want_wg = ops.rmsnorm_backward(grad, norm_input, rstd, w)
    same((xg, wg), (want_xg, want_wg.to(w.dtype)))
    acc = torch.ones(H, dtype=torch.float32)
    assert tk.quant.norm_backward(grad, norm_input, w, rstd, weight_grad=acc)[1] is acc
    assert torch.equal(acc, 1 + want_wg)


def test_moe_gates_and_helpers():
    """TileKernels' MoE tests: the out=/scores= forms bitwise equal to the allocating ones, the release's
    normalize_weight, and the first release's helpers on their ops."""
    logits, w = randn(T, 72, dtype=torch.float32), torch.rand(T, 6, generator=g)
    mask = torch.arange(T) % 5 != 0
    idx, wt = tk.moe.moe_topk_gate_forward(logits, 6, True, 2, 1.5, 0, mask=mask)
    out = (torch.empty_like(idx), torch.empty_like(wt))
    scores, unmapped = torch.empty(T, 72), torch.empty(T, 6, dtype=torch.int64)
    assert tk.moe.moe_topk_gate(logits, 6, True, 2, 1.5, 0, mask=mask, out=out, scores=scores,
                                unmapped_topk_idx=unmapped) is out
    same(out, (idx, wt))
    same((idx, wt, scores), ops.moe_topk_gate_forward(logits, 6, 8, mask=mask.to(torch.int32),
                                                      routed_scaling_factor=1.5))
    same(unmapped, idx[:, :6].contiguous())
    grad = tk.moe.moe_topk_gate_backward(scores, unmapped, wt[:, :6].contiguous(), w, 1.5)
    same(grad, ops.moe_topk_gate_backward(scores, unmapped, wt[:, :6].contiguous(), w, 1.5))
    same(tk.moe.normalize_weight(w), ops.normalize_weight(w))
    same(tk1.moe.normalize_weight(w), ops.normalize_weight_sequential(w))
    ids = torch.randint(-1, 72, (T, 6), generator=g)
    same(tk1.moe.group_count(ids, 72), ops.group_count(ids, 72))
    same(tk1.moe.mask_indices_by_tp(ids, 72, 4, 1, 2), ops.mask_indices_by_tp(ids, 72, 4, 1, 2))
    same(tk1.moe.topk_sum_and_topk_group_idx(logits.view(T, 8, 9), 2, 4),
         ops.topk_sum_and_topk_group_idx(logits.view(T, 8, 9), 2, 4))


def test_topk_gate_and_transpose():
    scores = randn(T, 72, dtype=torch.float32)
    same(tk.moe.topk_gate(scores, 6), ops.topk_gate(scores, 6))
    same(tk1.moe.topk_gate(scores, 6), ops.topk_gate(scores, 6))
    x = randn(3, 64, 128).to(torch.float8_e4m3fn)
    same(tk1.transpose.batched_transpose(x), ops.batched_transpose(x))
    same(tk1.transpose.transpose(x[0]), x[0].T.contiguous())
    same(tk1.transpose.transpose(x[0]), ops.transpose_2d(x[0]))
    strided = randn(64, 256)[:, :128]                              # TileKernels' test: row stride 2N
    same(tk1.transpose.transpose(strided), strided.T.contiguous())


@pytest.mark.parametrize("root", [tk, tk1], ids=["2.1.0", "1.0"])
def test_unpack_from_e2m1fn_x2(root):
    q, _ = tk.quant.per_token_cast(randn(T, H), "e2m1", 32)
    want = ops.unpack_from_e2m1fn_x2(q)
    same(root.quant.unpack_from_e2m1fn_x2(q), want)
    same(root.quant.unpack_from_e2m1fn_x2(q.view(torch.uint8).reshape(3, 11, H // 2)), want.reshape(3, 11, H))
    same(root.quant.unpack_from_e2m1fn_x2(q, torch.bfloat16), ops.unpack_from_e2m1fn_x2(q, "bf16"))
    assert root.quant.unpack_from_e2m1fn_x2(q[:, :0]).shape == (T, 0)
    # other dtypes as 2.1.0 makes them, from float32 values by .to: exact in float64, truncated in integers
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8).reshape(4, 64)
    values = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    nibbles = torch.stack([codes.view(torch.uint8).long() & 15, codes.view(torch.uint8).long() >> 4], -1).flatten(-2)
    exact = torch.where(nibbles >= 8, -values[nibbles & 7], values[nibbles & 7])
    same(root.quant.unpack_from_e2m1fn_x2(codes, torch.float64), exact)
    same(root.quant.unpack_from_e2m1fn_x2(codes, torch.int32), exact.trunc().to(torch.int32))
    with pytest.raises(TypeError, match="out_dtype"):
        root.quant.unpack_from_e2m1fn_x2(codes, "float64")


@pytest.mark.parametrize("src, dst", [(torch.bfloat16, torch.float8_e4m3fn), (torch.float32, torch.bfloat16),
                                      (torch.float8_e4m3fn, torch.float32)])
def test_cast_any_shape_and_in_chunks(src, dst, monkeypatch):
    x = (randn(3, 5, 77, dtype=torch.float32) * 300).to(src)
    want = ops.elementwise_cast(x.reshape(-1), dst).view(x.shape)
    same(tk.quant.cast(x, dst), want)
    monkeypatch.setattr(tk.quant, "CAST_CHUNK", 1024)      # 3 launches, each into its slice of one result
    same(tk.quant.cast(x, dst), want)


@pytest.mark.parametrize("src, dst", [(torch.float32, torch.bfloat16), (torch.float32, torch.float8_e4m3fn),
                                      (torch.bfloat16, torch.float8_e4m3fn)])
def test_stochastic_cast_any_shape(src, dst):
    x = (randn(3, 4, 100, dtype=torch.float32) * 30).to(src)
    same(tk.quant.cast(x, dst, stochastic_rounding=True), ops.stochastic_cast(x.reshape(-1, 4), dst).view(x.shape))


@pytest.mark.parametrize("packed", [False, True])
def test_per_token_cast_stochastic(packed):
    x = randn(T, H)
    flags = dict(use_tma_aligned_col_major_sf=packed, round_sf=packed, use_packed_ue8m0=packed)
    want = ops.per_token_cast_stochastic(x, 128, "ue8m0" if packed else "fp32", "col" if packed else "row")
    got = tk.quant.per_token_cast(x, "e4m3", 128, stochastic_cast=True, **flags)
    same(got[0], want[0])
    same(got[1], want[1])
    out = ops.per_token_cast_stochastic(torch.zeros_like(x), 128, "ue8m0" if packed else "fp32",
                                        "col" if packed else "row")             # buffers of that layout
    got = tk.quant.per_token_cast(x, "e4m3", 128, stochastic_cast=True, out=out, **flags)
    assert got[0] is out[0] and got[1] is out[1]
    same(out[0], want[0])
    same(out[1], want[1])


def test_stochastic_cast_in_chunks_counts_quads_on(monkeypatch):
    x = randn(3, 4, 100, dtype=torch.float32) * 30
    want = ops.stochastic_cast(x.reshape(-1, 4), "bf16").view(x.shape)
    monkeypatch.setattr(tk.quant, "CAST_CHUNK", 1024)      # 2 launches, the second from quad 256
    same(tk.quant.cast(x, torch.bfloat16, stochastic_rounding=True), want)
    assert tk.quant.cast(x[:0], torch.bfloat16, stochastic_rounding=True).shape == (0, 4, 100)


@pytest.mark.parametrize("x, dst", [(randn(8), torch.bfloat16), (randn(8, dtype=torch.float32), torch.float32),
                                    (randn(8).to(torch.float8_e4m3fn), torch.bfloat16),
                                    (randn(6, dtype=torch.float32), torch.bfloat16)])
def test_stochastic_cast_takes_only_tilekernels_pairs_of_quads(x, dst):
    with pytest.raises(ValueError, match=r"`(dtype|x)` with stochastic_rounding"):
        tk.quant.cast(x, dst, stochastic_rounding=True)


# Each release's public names (their __init__ files), module by module.
V2 = {"quant": ["per_channel_cast", "unpack_from_e2m1fn_x2", "per_token_cast", "per_token_cast_with_precomputed_sf",
                "per_token_cast_with_sf_only", "per_block_cast", "per_block_cast_with_precomputed_sf",
                "per_block_cast_with_sf_only", "cast_back", "per_token_cast_back", "cast",
                "per_token_cast_and_cast_back", "swiglu_backward_and_per_token_cast", "swiglu_backward",
                "swiglu_forward_and_per_token_cast", "swiglu_forward", "per_block_cast_lossless",
                "batched_transpose_weight_sf", "norm_forward_and_per_token_cast", "norm_forward", "norm_backward"],
      "moe": ["normalize_weight", "moe_topk_gate", "moe_topk_gate_forward", "moe_topk_gate_backward", "topk_gate"],
      "engram": ["fused_weight", "engram_gate_bwd", "engram_gate_fwd", "grad_w_reduce", "engram_hash",
                 "engram_sinkhorn_finalize", "engram_sinkhorn_momentum_update", "engram_sinkhorn_step",
                 "engram_sinkhorn_step_reduce"],
      "rand": ["randn", "randn_like", "set_seed"], "transform": ["apply_rotary"],
      "modeling.engram": ["engram_gate", "EngramGateFn"],
      "mhc": ["expand_to_mhc_fwd", "mhc_post_fwd", "mhc_sinkhorn_bwd", "mhc_pre_big_fuse_fwd"]}
V1 = {"quant": ["swiglu_forward_and_per_channel_cast_and_transpose", "per_channel_cast", "per_channel_cast_fused",
                "per_channel_cast_and_transpose", "swiglu_forward_and_per_token_cast",
                "swiglu_backward_and_per_token_cast", "unpack_from_e2m1fn_x2", "per_token_cast",
                "per_token_cast_with_precomputed_sf", "per_token_cast_with_sf_only", "per_block_cast",
                "per_block_cast_with_precomputed_sf", "per_block_cast_with_sf_only", "cast_back",
                "per_token_cast_back", "per_block_cast_lossless"],
      "moe": ["get_fused_mapping", "reduce_fused", "expand_to_fused", "expand_to_fused_with_sf",
              "inplace_unique_group_indices", "aux_fi", "group_count", "mask_indices_by_tp", "normalize_weight",
              "top2_sum_gate", "topk_gate", "topk_sum_and_topk_group_idx"],
      "transpose": ["transpose", "batched_transpose"],
      "engram": ["fused_weight", "engram_gate_fwd", "engram_gate_bwd", "grad_w_reduce", "engram_hash"],
      "modeling.engram": ["engram_gate"], "modeling.mhc": ["expand_from_embedding", "mhc_head", "mhc_pre"],
      "modeling.mhc.ops": ["expand_to_mhc", "mhc_head_compute_mix", "mhc_multilayer_recompute", "mhc_pre_norm_fn",
                           "mhc_post", "mhc_post_bwd", "mhc_post_fwd", "mhc_pre_apply_mix", "mhc_pre_big_fuse",
                           "mhc_pre_split_mixes", "sinkhorn_normalize"]}


def _module(root, path):
    for part in path.split("."):
        root = getattr(root, part)
    return root


@pytest.mark.parametrize("root, names", [(tk, V2), (tk1, V1)], ids=["2.1.0", "1.0"])
def test_every_name_is_there_and_what_is_not_built_says_so(root, names):
    for path, fns in names.items():
        mod = _module(root, path)
        for name in fns:
            fn = getattr(mod, name)
            if fn.__doc__ and "not built in tkgen yet" in fn.__doc__:
                with pytest.raises(NotImplementedError, match=f"TileKernels' {path}.{name} is not built"):
                    fn(None)
    assert not hasattr(tk, "transpose") and not hasattr(tk1, "rand")       # 2.1.0 dropped transpose


def test_every_engram_function_is_built():
    """Both releases' engram and modeling.engram are tkgen kernels: no stand-in is left."""
    for root, names in ((tk, V2), (tk1, V1)):
        for path in ("engram", "modeling.engram"):
            for name in names[path]:
                assert "not built in tkgen yet" not in (getattr(_module(root, path), name).__doc__ or ""), name


def test_batched_transpose_weight_sf_is_built():
    """2.1.0's quant.batched_transpose_weight_sf is the generated transpose_weight_sf, no longer a stand-in
    (its numerics: tests/test_transpose_weight_sf.py)."""
    fn = tk.quant.batched_transpose_weight_sf
    assert "not built in tkgen yet" not in (fn.__doc__ or "")
    sf = torch.full((2, 1), 0.5)
    ((sf0, sf1),) = fn([sf], 128, [True], [None])
    assert sf0.shape == (256, 1) and sf0.stride() == (1, 256) and sf1.shape == (1, 128) and sf1.stride() == (128, 1)
    assert bool((sf0 == 126).all()) and bool((sf1 == 126 | 126 << 8).all())

def test_mhc_pre_norm_fn_is_built_with_tilekernels_signature():
    """The first release's pre-norm GEMM (no longer a `missing` stand-in): residual (..., m, D), fn, an
    optional norm weight, eps, and fuse_grad_acc and n_splits accepted; mixes (..., m * (m + 2))."""
    m, d = 4, 64
    res, fn, w = randn(2, 3, m, d), randn(m * (m + 2), m * d, dtype=torch.float32), randn(m * d, dtype=torch.float32)
    fn_ops = tk1.modeling.mhc.ops.mhc_pre_norm_fn
    assert "not built in tkgen yet" not in (fn_ops.__doc__ or "")
    got = fn_ops(res, fn, w, 1e-6, fuse_grad_acc=True, n_splits=16)
    want = ops.mhc_pre_norm_fn(res.reshape(6, m * d), fn, w, eps=1e-6)[0].reshape(2, 3, m * (m + 2))
    compare("mixes", got, want, "bit")



def test_the_first_releases_mhc_ops_are_all_built():
    """mhc_pre_big_fuse is bit-equal to the composite path it fuses (operators-v1.md 7.8: torch.equal on all
    three outputs), the multilayer recompute to the single-layer ops in sequence (7.9), and mhc_post's kernel
    entry points to mhc_post; no name of modeling.mhc.ops is a stand-in any more."""
    mhc = tk1.modeling.mhc.ops
    assert all("not built in tkgen yet" not in (getattr(mhc, n).__doc__ or "") for n in mhc.__all__)
    m, d, n1 = 4, 64, 5
    g = torch.Generator().manual_seed(7)
    res = torch.randn(1, n1, m, d, generator=g).bfloat16()
    fn = torch.randn(m * (m + 2), m * d, generator=g) * 0.1
    scale, base = torch.randn(3, generator=g) * 0.1, torch.randn(m * (m + 2), generator=g) * 0.1
    post, comb, layer_input = mhc.mhc_pre_big_fuse(res, fn, scale, base, 1e-6, 1e-6, 1e-6, 1.0, 10)
    with torch.no_grad():
        mixes = mhc.mhc_pre_norm_fn(res, fn, None, 1e-6, fuse_grad_acc=False)
        pre, post_c, comb_c = mhc.mhc_pre_split_mixes(mixes, scale, base, m, 1.0, 1e-6)
        comb_c = mhc.sinkhorn_normalize(comb_c, 10, 1e-6)
        layer_c = mhc.mhc_pre_apply_mix(res, pre)
    assert post.shape == (1, n1, m, 1) and comb.shape == (1, n1, m, m) and layer_input.shape == (1, n1, d)
    for got, want in ((post, post_c), (comb, comb_c), (layer_input, layer_c)):
        assert torch.equal(got, want)
    x = torch.randn(1, n1, d, generator=g).bfloat16()
    assert torch.equal(mhc.mhc_post_fwd(x, res, post, comb), mhc.mhc_post(x, res, post, comb))
    layer_inputs, residuals = [torch.empty(1, n1, d).bfloat16() for _ in range(2)], [torch.empty_like(res)]
    assert mhc.mhc_multilayer_recompute(res, [pre, pre], [x], [post], [comb], layer_inputs, residuals) is None
    r1 = mhc.mhc_post(x, res, post, comb)
    assert torch.equal(layer_inputs[0], layer_c) and torch.equal(residuals[0], r1)
    assert torch.equal(layer_inputs[1], mhc.mhc_pre_apply_mix(r1, pre))

def test_options_tkgen_lacks_raise_naming_them():
    x = randn(T, H)
    with pytest.raises(NotImplementedError, match="per_token_cast with stochastic_cast=True into e2m1"):
        tk.quant.per_token_cast(x, "e2m1", 32, stochastic_cast=True)


def test_runtime_knobs():
    """2.1.0's config knobs: the defaults, what is stored (the amax clamps too, whose casts
    tests/test_amax_clamp.py checks), and what reset_runtime_config restores."""
    assert tk.config.get_amax_clamp_for_quant is tk.get_amax_clamp_for_quant
    defaults = [1e-4, 0.875, 6 * 2.0 ** -126, 6 * 2.0 ** -9]
    assert [tk.get_amax_clamp_for_quant(f, e) for f in ("e4m3", "e2m1") for e in (False, True)] == defaults
    tk.set_amax_clamp_for_quant("e4m3", True, 0.875)
    with pytest.raises(NotImplementedError, match="set_amax_clamp_for_quant with use_e4m3_sf=True and a clamp below"):
        tk.set_amax_clamp_for_quant("e4m3", True, 0.5)
    with pytest.raises(ValueError, match="clamp_min_value"):
        tk.set_amax_clamp_for_quant("e4m3", False, -1.0)
    try:
        tk.set_amax_clamp_for_quant("e4m3", False, 1e6)
        tk.set_amax_clamp_for_quant("e2m1", True, 3.0)
        assert [tk.get_amax_clamp_for_quant(f, e) for f in ("e4m3", "e2m1") for e in (False, True)] == \
            [1e6, 0.875, 6 * 2.0 ** -126, 3.0]
        tk.set_token_alignment(256)
        tk.use_deterministic_algorithms(True)
        tk.set_pdl(True)
        with pytest.raises(ValueError, match="positive integer"):
            tk.set_token_alignment(0)
        assert (tk.get_token_alignment(), tk.get_deterministic_algorithms(), tk.get_pdl()) == (256, True, True)
    finally:
        tk.reset_runtime_config()
    assert (tk.get_token_alignment(), tk.get_deterministic_algorithms(), tk.get_pdl()) == (128, False, False)
    assert [tk.get_amax_clamp_for_quant(f, e) for f in ("e4m3", "e2m1") for e in (False, True)] == defaults
