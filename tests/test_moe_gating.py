"""The MoE gating and routing helpers of issue 12 that need no row scatter (mask_indices_by_tp,
normalize_weight in both releases' numerics, topk_sum_and_topk_group_idx, group_count, aux_fi): each CPU
kernel, through tkgen.ops or the compat layers, against an oracle written here without tkgen (a warp
butterfly simulated lane by lane, bincount, a stable sort), plus the invariants of a count."""
import numpy as np
import pytest
import torch

import tkgen.compat.tilekernels as tk
import tkgen.compat.tilekernels_v1 as tk1
import tkgen.ops as ops

g = torch.Generator().manual_seed(12)


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    assert torch.equal(a, b)


def butterfly_sum(row):
    """What lane 0 holds after a warp's shuffle-xor sum (offsets 16 .. 1) of len(row) lanes, a partner
    lane that holds no weight skipped, in float32."""
    lanes = [np.float32(v) for v in row] + [None] * (32 - len(row))
    for off in (16, 8, 4, 2, 1):
        lanes = [a if a is None or lanes[i ^ off] is None else np.float32(a + lanes[i ^ off])
                 for i, a in enumerate(lanes)]
    return lanes[0]


@pytest.mark.parametrize("k", [3, 8])
def test_normalize_weight_numerics_of_both_releases(k):
    w = torch.rand(9, k, generator=g) * torch.tensor(2.0) ** torch.randint(-20, 20, (9, k), generator=g)
    w[0] = 0.0
    den, out = tk.moe.normalize_weight(w)
    want = torch.tensor([butterfly_sum(r.tolist()) + np.float32(1e-20) for r in w], dtype=torch.float32)
    same_bits(den, want)
    same_bits(out, w / want[:, None])
    den1, out1 = tk1.moe.normalize_weight(w)
    seq = []
    for r in w.tolist():
        acc = np.float32(1e-20)
        for v in r:
            acc = np.float32(acc + np.float32(v))
        seq.append(acc)
    seq = torch.tensor(seq, dtype=torch.float32)
    same_bits(den1, seq)
    same_bits(out1, w / seq[:, None])
    if k == 8:
        assert not torch.equal(den, den1)       # the two trees differ on these weights


def mask_oracle(v, n, ep, tp_rank, tp):
    per_gpu, per_dp = n // ep, tp * (n // ep)
    if v < 0 or (v // per_gpu) % tp != tp_rank:
        return -1
    v -= tp_rank * per_gpu
    v -= v // per_dp * (per_dp - per_gpu)
    return v if v >= 0 else -1


@pytest.mark.parametrize("tp, dtype", [(2, torch.int64), (4, torch.int32)])
def test_mask_indices_by_tp(tp, dtype):
    n, ep = 64, 4
    idx = torch.randint(-1, n, (11, 6), generator=g).to(dtype)
    for rank in (0, tp - 1):
        got = tk1.moe.mask_indices_by_tp(idx, n, ep, rank, tp)
        want = torch.tensor([[mask_oracle(int(v), n, ep, rank, tp) for v in r] for r in idx.tolist()], dtype=dtype)
        same_bits(got, want)
        kept = got[got >= 0]
        assert kept.numel() == sum(mask_oracle(int(v), n, ep, rank, tp) >= 0 for v in idx.flatten())
        assert kept.numel() == 0 or int(kept.max()) < n // tp           # each TP rank sees its share of the experts


def test_group_count_and_aux_fi():
    t, k, e = 37, 6, 72
    idx = torch.randint(-1, e, (t, k), generator=g)
    idx[3] = -1
    count = tk1.moe.group_count(idx, e)
    want = torch.bincount(idx[idx >= 0], minlength=e).to(torch.int32)
    same_bits(count, want)
    assert int(count.sum()) == int((idx >= 0).sum())         # every routed slot counted once
    same_bits(tk1.moe.group_count(idx, 8), torch.bincount(idx[(idx >= 0) & (idx < 8)], minlength=8).to(torch.int32))
    f = tk1.moe.aux_fi(idx, e, 2)
    same_bits(f, want.to(torch.float32) * e / (t * 2))
    empty = idx[:0]
    same_bits(tk1.moe.group_count(empty, e), torch.zeros(e, dtype=torch.int32))
    same_bits(tk1.moe.aux_fi(empty, e, 2), torch.zeros(e, dtype=torch.float32))


@pytest.mark.parametrize("topk_sum", [1, 2])
def test_topk_sum_and_topk_group_idx(topk_sum):
    t, groups, per = 13, 8, 9
    scores = torch.randn(t, groups, per, generator=g)
    scores[0] = 0.5                                           # every group ties: the smaller index first
    got = tk1.moe.topk_sum_and_topk_group_idx(scores, topk_sum, 4)
    group_score = scores.topk(topk_sum, dim=-1).values.sum(-1)
    want = group_score.sort(dim=-1, descending=True, stable=True).indices[:, :4]
    same_bits(got, want)
    assert got[0].tolist() == [0, 1, 2, 3]


def test_ranges_name_params_declared_after_them():
    idx = torch.zeros(2, 1, dtype=torch.int64)
    with pytest.raises(ValueError, match="tp_rank"):
        ops.mask_indices_by_tp(idx, 8, 2, 2, 2)               # tp_rank outside [0, num_tp_ranks - 1]
    with pytest.raises(ValueError, match="num_ep_ranks"):
        ops.mask_indices_by_tp(idx, 8, 9, 0, 2)               # more EP ranks than experts


def gate_oracle(logits, k, shared, rsf, mask, bias):
    """TileKernels 2.1.0's gate in float64 (selection by a stable sort of the float32 biased scores)."""
    u = torch.nn.functional.softplus(logits.double()).sqrt()
    key = u.float() + (bias if bias is not None else 0.0)
    sel = key.sort(dim=-1, descending=True, stable=True).indices[:, :k]
    picked = u.gather(1, sel)
    w = picked / (picked.sum(-1, keepdim=True) + 1e-20) * rsf
    t, e = logits.shape
    idx = torch.cat([sel, (e + torch.arange(shared)).expand(t, shared)], 1)
    w = torch.cat([w, torch.ones(t, shared, dtype=w.dtype)], 1)
    idx[~mask], w[~mask], u[~mask] = -1, 0.0, 0.0
    return idx, w, u


@pytest.mark.parametrize("shared, with_bias", [(0, False), (2, True)])
def test_moe_topk_gate_forward_against_float64(shared, with_bias):
    t, e, k = 10, 36, 6
    logits = torch.randn(t, e, generator=g)
    bias = torch.randn(e, generator=g) * 0.1 if with_bias else None
    mask = torch.ones(t, dtype=torch.bool)
    mask[[2, 7]] = False
    u_out, unmapped = torch.empty(t, e), torch.empty(t, k, dtype=torch.int64)
    idx, w = tk.moe.moe_topk_gate_forward(logits, k, shared > 0, shared, 1.5, 0, mask=mask, bias=bias,
                                           scores=u_out, unmapped_topk_idx=unmapped)
    want_idx, want_w, want_u = gate_oracle(logits, k, shared, 1.5, mask, bias)
    assert torch.equal(idx, want_idx) and torch.equal(unmapped, want_idx[:, :k])
    torch.testing.assert_close(w, want_w.float(), rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(u_out, want_u.float(), rtol=1e-5, atol=1e-8)
    assert torch.equal(u_out[~mask], torch.zeros(2, e))
    torch.testing.assert_close(w[mask, :k].sum(-1), torch.full((t - 2,), 1.5), rtol=1e-5, atol=0)
    zero = tk.moe.moe_topk_gate_forward(torch.zeros(3, e), k, False, 0, 1.0, 0)[0]
    assert zero.tolist() == [list(range(k))] * 3                    # equal scores: the smaller index first
    with pytest.raises(NotImplementedError, match="force_random"):
        tk.moe.moe_topk_gate_forward(logits, k, False, 0, 1.5, 0, force_random=mask)


def test_moe_topk_gate_backward_against_float64():
    t, e, k, rsf = 9, 16, 4, 1.5
    logits = torch.randn(t, e, generator=g)
    u = torch.empty(t, e)
    unmapped = torch.empty(t, k, dtype=torch.int64)
    mask = torch.ones(t, dtype=torch.bool)
    mask[4] = False
    _, w = tk.moe.moe_topk_gate_forward(logits, k, False, 0, rsf, 0, mask=mask, scores=u, unmapped_topk_idx=unmapped)
    unmapped[1, 1] = unmapped[1, 0]                                  # a repeated expert (fixed routing) adds up
    grad_w = torch.randn(t, k, generator=g)
    got = tk.moe.moe_topk_gate_backward(u, unmapped, w, grad_w, rsf)
    # the gradient through the definition: d/dl of w_k = u_k / (sum u + 1e-20) * rsf, u = sqrt(softplus(l))
    ud, valid = u.double(), unmapped >= 0
    ids = unmapped.clamp(min=0)
    den = (ud.gather(1, ids) * valid).sum(-1, keepdim=True) + 1e-20
    rho = (grad_w.double() * w.double() * valid).sum(-1, keepdim=True)
    du = torch.zeros(t, e, dtype=torch.float64).scatter_add_(1, ids, (rsf * grad_w.double() - rho) / den * valid)
    want = torch.where(ud > 0, (1 - torch.exp(-ud * ud)) / (2 * ud), 0.0) * du     # u' = 0 at u = 0
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert torch.equal(got[4], torch.zeros(e))                       # a token not routed has no gradient


@pytest.mark.parametrize("scoring, groups, topk_groups, tp", [("sigmoid", 8, 4, 2), ("softmax", 0, 0, 1),
                                                              ("sqrtsoftplus", 4, 2, 2)])
def test_top2_sum_gate_against_a_sort(scoring, groups, topk_groups, tp):
    t, e, k, rsf = 11, 64, 6, 1.5
    logits = torch.randn(t, e, generator=g)
    bias = torch.randn(e, generator=g) * 0.1
    mask = torch.ones(t, dtype=torch.bool)
    mask[5] = False
    unmapped = torch.empty(t, k, dtype=torch.int64)
    idx, w = tk1.moe.top2_sum_gate(logits, bias, k, topk_groups, groups, False, 0, rsf, 0, 4, tp - 1, tp, scoring,
                                   mask=mask, unmapped_topk_idx=unmapped)
    ld = logits.double()
    s = {"sigmoid": torch.sigmoid(ld), "softmax": torch.softmax(ld, -1),
         "sqrtsoftplus": torch.nn.functional.softplus(ld).sqrt()}[scoring]
    r = (ld if scoring == "softmax" else s) + bias.double()
    if groups:
        group_score = r.view(t, groups, -1).topk(2, -1).values.sum(-1)
        best = group_score.sort(dim=-1, descending=True, stable=True).indices[:, :topk_groups]
        keep = torch.zeros(t, groups, dtype=torch.bool).scatter_(1, best, True)
        r = r.masked_fill(~keep.repeat_interleave(e // groups, 1), -float("inf"))
    sel = r.sort(dim=-1, descending=True, stable=True).indices[:, :k]
    picked = s.gather(1, sel)
    want_w = picked / (picked.sum(-1, keepdim=True) + 1e-20) * rsf
    want_idx = torch.tensor([[mask_oracle(int(v), e, 4, tp - 1, tp) for v in row] for row in sel.tolist()])
    want_idx[~mask], want_w[~mask], sel[~mask] = -1, 0.0, -1
    assert torch.equal(unmapped, sel) and torch.equal(idx, want_idx)
    torch.testing.assert_close(w, want_w.float(), rtol=1e-5, atol=1e-8)
    with pytest.raises(ValueError, match="top2_sum_gate: `to_physical_map` must have at least num_shared_experts"):
        tk1.moe.top2_sum_gate(logits, bias, k, 0, 0, True, 1, rsf, 0, 4, 0, 1, scoring)


def test_reference_sqrt_is_correctly_rounded():
    from tkgen.runtime.torch_prims import _sqrt
    x = torch.cat([torch.tensor([0.6931471824645996, 0.04858735203742981]), torch.rand(4096, generator=g) * 100])
    assert torch.equal(_sqrt(x), torch.sqrt(x.double()).float())


def _libm():
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for fn in (libm.log1pf, libm.expf):
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return np.vectorize(lambda x: np.float32(libm.log1pf(libm.expf(float(x)))), otypes=[np.float32])


LOG1P_EXP = _libm()   # libm's float32 log1pf(expf(x)), as the C target computes softplus (numpy's differs)


def physical_map_for(logical, dups, gen):
    """A random contiguous physical map with 1 to `dups` duplicates per logical expert (TileKernels' test
    builds one so): physical ids numbered expert by expert, -1 in the unused columns."""
    count = torch.randint(1, dups + 1, (logical,), generator=gen, dtype=torch.int32)
    start = torch.cumsum(count, 0) - count
    cols = torch.arange(dups, dtype=torch.int32)
    pmap = torch.where(cols < count[:, None], start[:, None] + cols, -1).to(torch.int32)
    return pmap, count


def gate_oracle_v2(logits, k, shared, rsf, ep_rank, mask=None, bias=None, image_bias=None, image_mask=None,
                   fixed=None, fixed_idx=None, pmap=None, count=None):
    """TileKernels 2.1.0's gate as operators-v2.md 2.1 documents it, in numpy float32: u = sqrt(softplus(l));
    the key u + (image_bias on image tokens, else bias); a stable descending sort, or the given row on fixed
    tokens; weights u[sel] / (butterfly tree sum + 1e-20) * rsf; shared slots E + s, weight 1; the physical
    map with dup = (ep_rank + t * 23333) mod count[l] (small t: no int32 overflow); masked rows -1 / 0."""
    lf = logits.numpy().astype(np.float32)
    t, e = lf.shape
    u = np.sqrt(np.where(lf > 20, lf, LOG1P_EXP(lf)).astype(np.float32)).astype(np.float32)
    b = np.zeros((t, e), np.float32) if bias is None else np.broadcast_to(bias.numpy(), (t, e)).copy()
    if image_mask is not None:
        b[image_mask.numpy().astype(bool)] = image_bias.numpy()
    key = (u + b).astype(np.float32)
    sel = np.argsort(-key, axis=1, kind="stable")[:, :k].astype(np.int64)
    if fixed is not None:
        rows = fixed.numpy().astype(bool)
        sel[rows] = fixed_idx.numpy()[rows]
    idx = np.full((t, k + shared), -1, np.int64)
    w = np.zeros((t, k + shared), np.float32)
    unmapped = np.full((t, k), -1, np.int64)
    routed = np.ones(t, bool) if mask is None else mask.numpy().astype(bool)
    for r in range(t):
        if not routed[r]:
            continue
        picked = u[r, sel[r]]
        den = np.float32(butterfly_sum(picked.tolist()) + np.float32(1e-20))
        w[r, :k] = (picked / den).astype(np.float32) * np.float32(rsf)
        w[r, k:] = 1.0
        logical = list(sel[r]) + [e + s for s in range(shared)]
        if pmap is not None:
            logical = [int(pmap[lg, (ep_rank + r * 23333) % int(count[lg])]) for lg in logical]
        idx[r] = logical
        unmapped[r] = sel[r]
    u[~routed] = 0.0
    return torch.from_numpy(idx), torch.from_numpy(w), torch.from_numpy(u), torch.from_numpy(unmapped)


GATE_CASES = [  # (E, S, K, mask, bias, image, fixed, physical map)
    (36, 0, 6, True, False, False, True, False),
    (72, 1, 6, False, True, False, True, True),
    (16, 2, 6, True, True, True, False, True),
    (32, 2, 6, True, False, True, True, False),
    (64, 0, 8, False, False, True, False, False),
    (36, 2, 6, True, True, True, True, True),
    (16, 0, 4, True, True, False, False, True),
    (64, 2, 8, False, True, True, True, True),
]


@pytest.mark.parametrize("e, shared, k, with_mask, with_bias, image, fix, mapped", GATE_CASES)
def test_moe_topk_gate_forward_options(e, shared, k, with_mask, with_bias, image, fix, mapped):
    """Fixed routing with unmapped_topk_idx in/out, image bias with its token mask, the physical map with
    logical counts and duplicates and shared experts as routed: bit for bit against the documented rule,
    through tkgen.compat.tilekernels and tkgen.ops."""
    gen = torch.Generator().manual_seed(e * 100 + shared * 10 + k)
    t, rsf, ep_rank = 29, 1.5, 3 if mapped else 0
    logits = torch.randn(t, e, generator=gen)
    mask = torch.rand(t, generator=gen) > 0.2 if with_mask else None
    bias = torch.randn(e, generator=gen) * 0.1 if with_bias else None
    image_bias = torch.randn(e, generator=gen) * 0.1 if image else None
    image_mask = torch.rand(t, generator=gen) > 0.5 if image else None
    fixed = torch.rand(t, generator=gen) > 0.5 if fix else None
    given = torch.randint(0, e, (t, k), generator=gen)
    given[0, 1] = given[0, 0]                                   # fixed rows may repeat an expert
    if fix:
        fixed[0] = True
    pmap, count = physical_map_for(e + shared, 3, gen) if mapped else (None, None)
    unmapped = given.clone()
    scores = torch.empty(t, e)
    idx, w = tk.moe.moe_topk_gate_forward(logits, k, shared > 0, shared, rsf, ep_rank, mask=mask, bias=bias,
                                           image_bias=image_bias, image_token_mask=image_mask,
                                           fix_routing_mask=fixed, to_physical_map=pmap, logical_count=count,
                                           unmapped_topk_idx=unmapped, scores=scores)
    want_idx, want_w, want_u, want_unmapped = gate_oracle_v2(
        logits, k, shared, rsf, ep_rank, mask, bias, image_bias, image_mask, fixed, given, pmap, count)
    same_bits(idx, want_idx)
    same_bits(unmapped, want_unmapped)
    same_bits(w, want_w)
    same_bits(scores, want_u)
    i32 = (lambda m: None if m is None else m.to(torch.int32))
    got = ops.moe_topk_gate_forward(logits, k, k + shared, mask=i32(mask), bias=bias, image_bias=image_bias,
                                    image_token_mask=i32(image_mask), fix_routing_mask=i32(fixed),
                                    unmapped_topk_idx=given if fix else None, to_physical_map=pmap,
                                    logical_count=count, routed_scaling_factor=rsf, ep_rank=ep_rank,
                                    num_dups=3 if mapped else 1)
    assert len(got) == (4 if mapped else 3)           # the selection (`unmapped`) comes with the physical map
    for a, b in zip(got, (want_idx, want_w, want_u, want_unmapped)):
        same_bits(a, b)


def test_moe_topk_gate_forward_option_checks():
    logits = torch.randn(4, 16, generator=g)
    pmap, count = physical_map_for(16, 2, g)
    name = "moe_topk_gate_forward"
    with pytest.raises(ValueError, match=f"{name}: `image_token_mask` and `image_bias` go together"):
        tk.moe.moe_topk_gate_forward(logits, 4, False, 0, 1.0, 0, image_bias=torch.zeros(16))
    with pytest.raises(ValueError, match=f"{name}: `unmapped_topk_idx` must be given with fix_routing_mask"):
        tk.moe.moe_topk_gate_forward(logits, 4, False, 0, 1.0, 0, fix_routing_mask=torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=f"{name}: `logical_count` and `to_physical_map` go together"):
        tk.moe.moe_topk_gate_forward(logits, 4, False, 0, 1.0, 0, to_physical_map=pmap)
    with pytest.raises(ValueError, match=f"{name}: `to_physical_map` and `logical_count` must have 18 rows"):
        tk.moe.moe_topk_gate_forward(logits, 4, True, 2, 1.0, 0, to_physical_map=pmap, logical_count=count)
    with pytest.raises(TypeError, match=f"{name}: `to_physical_map` must have dtype torch.int32"):
        tk.moe.moe_topk_gate_forward(logits, 4, False, 0, 1.0, 0, to_physical_map=pmap.long(), logical_count=count)
    with pytest.raises(ValueError, match=f"{name}: `unmapped_topk_idx` must have shape"):
        tk.moe.moe_topk_gate_forward(logits, 4, False, 0, 1.0, 0, unmapped_topk_idx=torch.zeros(4, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="`image_token_mask` goes with `image_bias`: give both or neither"):
        ops.moe_topk_gate_forward(logits, 4, 4, image_token_mask=torch.ones(4, dtype=torch.int32))


def _expf():
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    return np.vectorize(lambda x: np.float32(libm.expf(float(x))), otypes=[np.float32])


EXPF = _expf()


def top2_oracle(logits, bias, k, groups, topk_groups, shared, rsf, ep_rank, ep, tp_rank, tp, scoring, mask, fixed,
                given, pmap, count):
    """The first release's top2_sum_gate as operators-v1.md 3.1 documents it, in numpy float32 (libm's
    expf and log1pf, as the C target): scores, ranking scores, the two-largest group sums and the kept
    groups, a stable descending sort (or the given row on fixed tokens), weights s[sel] / (1e-20 + s0 + s1
    + ...) * rsf, shared slots E + s with weight 1, the physical map with dup = (ep_rank + t * 23333) mod
    count[l], the EP/TP remap over E + D - 1 physical experts; masked rows -1 / 0."""
    lf = logits.numpy().astype(np.float32)
    t, e = lf.shape
    if scoring == "sigmoid":
        sc = (np.float32(1) / (np.float32(1) + EXPF(-lf))).astype(np.float32)
    elif scoring == "sqrtsoftplus":
        sc = np.sqrt(np.where(lf > 20, lf, LOG1P_EXP(lf)).astype(np.float32)).astype(np.float32)
    else:
        ex = EXPF(lf - lf.max(1, keepdims=True))
        total = np.zeros(t, np.float32)
        for i in range(e):
            total = (total + ex[:, i]).astype(np.float32)
        sc = (ex / total[:, None]).astype(np.float32)
    r = ((lf if scoring == "softmax" else sc) + bias.numpy()).astype(np.float32)
    if groups:
        top2 = -np.sort(-r.reshape(t, groups, -1), axis=-1)[..., :2]
        gs = (top2[..., 0] + top2[..., 1]).astype(np.float32)
        best = np.argsort(-gs, axis=1, kind="stable")[:, :topk_groups]
        keep = np.zeros((t, groups), bool)
        np.put_along_axis(keep, best, True, 1)
        r = np.where(np.repeat(keep, e // groups, 1), r, -np.inf).astype(np.float32)
    sel = np.argsort(-r, axis=1, kind="stable")[:, :k].astype(np.int64)
    if fixed is not None:
        rows = fixed.numpy().astype(bool)
        sel[rows] = given.numpy()[rows]
    dups = 1 if pmap is None else pmap.shape[1]
    idx = np.full((t, k + shared), -1, np.int64)
    w = np.zeros((t, k + shared), np.float32)
    unmapped = np.full((t, k), -1, np.int64)
    routed = np.ones(t, bool) if mask is None else mask.numpy().astype(bool)
    for row in range(t):
        if not routed[row]:
            continue
        picked = sc[row, sel[row]]
        den = np.float32(1e-20)
        for v in picked:
            den = np.float32(den + v)
        w[row, :k] = (picked / den).astype(np.float32) * np.float32(rsf)
        w[row, k:] = 1.0
        ids = list(sel[row]) + [e + s for s in range(shared)]
        if pmap is not None:
            ids = [int(pmap[lg, (ep_rank + row * 23333) % int(count[lg])]) for lg in ids]
        idx[row] = [mask_oracle(v, e + dups - 1, ep, tp_rank, tp) for v in ids]
        unmapped[row] = sel[row]
    return torch.from_numpy(idx), torch.from_numpy(w), torch.from_numpy(unmapped)


TOP2_CASES = [  # (scoring, groups, topk_groups, E, S, K, fixed, map: None / "identity" / "random", tp)
    ("sigmoid", 8, 4, 64, 2, 8, True, "identity", 2),
    ("sqrtsoftplus", 0, 0, 36, 1, 6, False, "random", 1),
    ("softmax", 4, 2, 64, 0, 6, True, "random", 2),
    ("sqrtsoftplus", 0, 0, 72, 0, 6, True, None, 2),
]


@pytest.mark.parametrize("scoring, groups, topk_groups, e, shared, k, fix, mapped, tp", TOP2_CASES)
def test_top2_sum_gate_options(scoring, groups, topk_groups, e, shared, k, fix, mapped, tp):
    """fix_routing_mask with unmapped_topk_idx in/out, the physical map with logical counts and duplicates
    (TileKernels' identity map with 32 extra duplicates, or a random one with 1 to 3 per expert), shared
    experts as routed through it: bit for bit against the documented rule (weights too, but for softmax,
    whose exponentials numpy's sum would not order as the kernel; allclose there), through
    tkgen.compat.tilekernels_v1 and tkgen.ops."""
    gen = torch.Generator().manual_seed(e * 10 + k)
    t, rsf, ep, tp_rank = 23, 1.5, 4, tp - 1
    logits = torch.randn(t, e, generator=gen)
    bias = torch.randn(e, generator=gen) * 0.1
    mask = torch.rand(t, generator=gen) > 0.2
    fixed = torch.rand(t, generator=gen) > 0.5 if fix else None
    given = torch.randint(0, e, (t, k), generator=gen)
    if mapped == "identity":
        dups = 33
        pmap = torch.arange(e + shared, dtype=torch.int32)[:, None].expand(e + shared, dups).contiguous()
        count = torch.ones(e + shared, dtype=torch.int32)
    elif mapped == "random":
        dups = 3
        pmap = torch.randint(0, e + dups - 1, (e + shared, dups), generator=gen, dtype=torch.int32)
        count = torch.randint(1, dups + 1, (e + shared,), generator=gen, dtype=torch.int32)
    else:
        dups, pmap, count = 1, None, None
    ep_rank = 5 if mapped else 0
    unmapped = given.clone()
    idx, w = tk1.moe.top2_sum_gate(logits, bias, k, topk_groups, groups, shared > 0, shared, rsf, ep_rank, ep, tp_rank,
                                   tp, scoring, mask=mask, fix_routing_mask=fixed, to_physical_map=pmap,
                                   logical_count=count, unmapped_topk_idx=unmapped)
    want_idx, want_w, want_unmapped = top2_oracle(logits, bias, k, groups, topk_groups, shared, rsf, ep_rank, ep,
                                                  tp_rank, tp, scoring, mask, fixed, given, pmap, count)
    same_bits(idx, want_idx)
    same_bits(unmapped, want_unmapped)
    if scoring == "softmax":
        torch.testing.assert_close(w, want_w, rtol=1e-5, atol=1e-8)
    else:
        same_bits(w, want_w)
    i32 = (lambda m: None if m is None else m.to(torch.int32))
    got = ops.top2_sum_gate(logits, bias, k, groups or 1, topk_groups or 1, ep, tp_rank, tp, num_shared=shared,
                            mask=i32(mask), fix_routing_mask=i32(fixed), unmapped_topk_idx=given if fix else None,
                            to_physical_map=pmap, logical_count=count, scoring=scoring, routed_scaling_factor=rsf,
                            ep_rank=ep_rank, num_dups=dups)
    for a, b in zip(got, (idx, w, unmapped)):
        same_bits(a, b)


@pytest.mark.parametrize("seqs", [1, 2, 3])
def test_moe_topk_gate_backward_grad_scores_sum(seqs):
    """2.1.0's sequence-level auxiliary term (operators-v2.md 2.2) against float64: on the tokens the mask
    marks, dL/du_e += (h_e - sum(h * u) / U) / U with U = sum(u) and h the row t // (T / N_seq) of
    grad_scores_sum; masked rows exactly 0; through tkgen.compat.tilekernels and tkgen.ops."""
    t, e, k, rsf = 12, 36, 6, 1.5
    logits = torch.randn(t, e, generator=g)
    mask = torch.ones(t, dtype=torch.bool)
    mask[[3, 10]] = False
    u, unmapped = torch.empty(t, e), torch.empty(t, k, dtype=torch.int64)
    _, w = tk.moe.moe_topk_gate_forward(logits, k, False, 0, rsf, 0, mask=mask, scores=u, unmapped_topk_idx=unmapped)
    unmapped[1, 1] = unmapped[1, 0]                                  # a repeated expert (fixed routing) adds up
    grad_w = torch.randn(t, k, generator=g)
    gss = torch.randn(seqs, e, generator=g)
    got = tk.moe.moe_topk_gate_backward(u, unmapped, w, grad_w, rsf, mask=mask, grad_scores_sum=gss)
    ud, valid = u.double(), unmapped >= 0
    ids = unmapped.clamp(min=0)
    den = (ud.gather(1, ids) * valid).sum(-1, keepdim=True) + 1e-20
    rho = (grad_w.double() * w.double() * valid).sum(-1, keepdim=True)
    du = torch.zeros(t, e, dtype=torch.float64).scatter_add_(1, ids, (rsf * grad_w.double() - rho) / den * valid)
    inv = torch.where(mask[:, None], 1 / ud.sum(-1, keepdim=True), 0.0)
    h = gss.double()[torch.arange(t) // (t // seqs)]
    du = du + (h - (h * ud).sum(-1, keepdim=True) * inv) * inv
    want = torch.where(ud > 0, (1 - torch.exp(-ud * ud)) / (2 * ud), 0.0) * du
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert torch.equal(got[[3, 10]], torch.zeros(2, e))
    same_bits(got, ops.moe_topk_gate_backward(u, unmapped, w, grad_w, rsf, gss, mask.to(torch.int32),
                                              num_seqs=seqs, seq_len=t // seqs))
    without = tk.moe.moe_topk_gate_backward(u, unmapped, w, grad_w, rsf)
    same_bits(without, tk.moe.moe_topk_gate_backward(u, unmapped, w, grad_w, rsf, mask=mask))   # mask alone: no term
    with pytest.raises(ValueError, match="moe_topk_gate_backward: `mask` must be given with grad_scores_sum"):
        tk.moe.moe_topk_gate_backward(u, unmapped, w, grad_w, rsf, grad_scores_sum=gss)
    with pytest.raises(ValueError, match="moe_topk_gate_backward: `grad_scores_sum` must have shape"):
        tk.moe.moe_topk_gate_backward(u, unmapped, w, grad_w, rsf, mask=mask, grad_scores_sum=torch.zeros(5, e))


def test_physical_map_duplicate_wraps_in_int32_past_token_92036():
    """(ep_rank + t * 23333) is int32 arithmetic with C's truncated remainder, as in TileKernels' kernel:
    past t = 92036 the product wraps negative (TileKernels' torch reference, in int64, differs there) and a
    negative remainder reads the map flat, before the expert's row (the previous expert's last columns)."""
    t, e, k, ep_rank = 92040, 4, 1, 7
    logits = torch.zeros(t, e)
    logits[:, 2] = 1.0                                               # every token picks expert 2
    count = torch.tensor([1, 3, 3, 1], dtype=torch.int32)
    pmap = torch.tensor([[1, -1, -1], [20, 21, 22], [30, 31, 32], [3, -1, -1]], dtype=torch.int32)
    idx, _ = tk.moe.moe_topk_gate_forward(logits, k, False, 0, 1.0, ep_rank, to_physical_map=pmap, logical_count=count)
    tok = ((ep_rank + np.arange(t, dtype=np.int64) * 23333 + 2**31) % 2**32 - 2**31).astype(np.int32)   # int32 wrap
    assert (tok[92037:] < 0).all() and (tok[:92037] >= 0).all()       # 2^31 / 23333 = 92036.3
    want = pmap.numpy().reshape(-1)[2 * 3 + np.fmod(tok, 3)]           # C's remainder, the map read flat
    assert torch.equal(idx[:, 0], torch.from_numpy(want.astype(np.int64)))
    assert set(want[92037:].tolist()) & {21, 22}                      # rows that read expert 1's columns


def test_the_calls_written_before_the_gate_options_keep_working():
    """Issue 27 item 5: every call of main's (before issue 28's options) signatures, positional, of
    tkgen.ops and of the torch.library custom ops, gives what it gave: the options come after the existing
    arguments with defaults, and the forward's `unmapped` comes back only with the physical map."""
    t, e, k, rsf = 6, 16, 4, 1.5
    logits = torch.randn(t, e, generator=g)
    bias = torch.randn(e, generator=g)
    mask = torch.tensor([1, 0, 1, 1, 1, 0], dtype=torch.int32)
    # moe_topk_gate_forward(logits, num_topk, num_slots, mask=None, bias=None, routed_scaling_factor=1.0)
    want_idx, want_w, want_u, _ = gate_oracle_v2(logits, k, 1, rsf, 0, mask.bool(), bias)
    for got in (ops.moe_topk_gate_forward(logits, k, k + 1, mask, bias, rsf),
                torch.ops.tkgen.moe_topk_gate_forward(logits, mask, bias, k, k + 1, rsf)[:3]):
        assert len(got) == 3
        for a, b in zip(got, (want_idx, want_w, want_u)):
            same_bits(a, b)
    idx, w, u = ops.moe_topk_gate_forward(logits, k, k, mask, None, rsf)
    # moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor=1.0)
    grad_w = torch.randn(t, k, generator=g)
    grad = ops.moe_topk_gate_backward(u, idx, w, grad_w, rsf)
    assert isinstance(grad, torch.Tensor) and grad.shape == (t, e)
    same_bits(grad, ops.moe_topk_gate_backward(u, idx, w, grad_w, routed_scaling_factor=rsf))
    same_bits(grad, torch.ops.tkgen.moe_topk_gate_backward(u, idx, w, grad_w, rsf))
    assert not torch.equal(grad, ops.moe_topk_gate_backward(u, idx, w, grad_w))      # rsf is read, not dropped
    # top2_sum_gate(logits, bias, num_topk, num_groups, num_topk_groups, num_ep_ranks, tp_rank, num_tp_ranks,
    #               mask=None, scoring='sigmoid', routed_scaling_factor=1.0)
    want = top2_oracle(logits, bias, k, 4, 2, 0, rsf, 0, 2, 1, 2, "sqrtsoftplus", mask.bool(), None, None, None, None)
    for got in (ops.top2_sum_gate(logits, bias, k, 4, 2, 2, 1, 2, mask, "sqrtsoftplus", rsf),
                torch.ops.tkgen.top2_sum_gate(logits, bias, mask, "sqrtsoftplus", k, 4, 2, rsf, 2, 1, 2)):
        assert len(got) == 3 and got[0].shape == (t, k)
        for a, b in zip(got, want):
            same_bits(a, b)
