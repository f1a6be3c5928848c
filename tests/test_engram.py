"""The Engram family beyond the property tests: the hash against Python's big integers over the whole int64
range, the gate's z == 0 sign and clamp edges, the inference form's bits, the gradients of the composite
against float64 autograd, deterministic backward passes, and the TileKernels-compatible API."""
import math

import pytest
import torch

import tkgen.compat.tilekernels as tk
import tkgen.compat.tilekernels_v1 as tk1
import tkgen.ops as ops

g = torch.Generator().manual_seed(13)


def bf16(*shape):
    return torch.randn(*shape, generator=g).to(torch.bfloat16)


def full_int(shape, bits):
    """Integers over the whole range of a signed `bits`-bit type (both ends included)."""
    top = torch.randint(-2 ** 31, 2 ** 31, shape, generator=g, dtype=torch.int64)
    x = (top << 32) | torch.randint(0, 2 ** 32, shape, generator=g, dtype=torch.int64)
    if bits == 32:
        x = x >> 32
    x.view(-1)[:2] = torch.tensor([-2 ** (bits - 1), 2 ** (bits - 1) - 1])
    return x.to(torch.int32 if bits == 32 else torch.int64)


def hash_oracle(ids, mult, vocab, offsets):
    """Python integers: products wrapped to int64, xor, floor modulo (0 for a zero divisor), wrapped to int32."""
    wrap = lambda x, b: (x + 2 ** (b - 1)) % 2 ** b - 2 ** (b - 1)  # noqa: E731
    L, N = mult.shape
    T, M = ids.shape[0], vocab.shape[2]
    out = torch.empty(L, T, (N - 1) * M, dtype=torch.int32)
    for l in range(L):
        for t in range(T):
            h = 0
            for i in range(N):
                h ^= wrap(int(ids[t, i]) * int(mult[l, i]), 64)
                for j in range(M if i else 0):
                    m = int(vocab[l, i - 1, j])
                    out[l, t, (i - 1) * M + j] = wrap((h % m if m else 0) + int(offsets[l, (i - 1) * M + j]), 32)
    return out


@pytest.mark.parametrize("wide", [False, True], ids=["tilekernels-range", "int64-range"])
def test_hash_against_big_integers(wide):
    T, L, N, M = 9, 2, 3, 4
    if wide:
        ids, mult = full_int((T, N), 32), full_int((L, N), 64)
        vocab, offsets = full_int((L, N - 1, M), 32), full_int((L, (N - 1) * M), 32)
        vocab.view(-1)[2] = 0
    else:       # TileKernels' test ranges, offsets its make_offsets (a prefix sum of the vocabulary sizes)
        ids = torch.randint(0, 100000, (T, N), generator=g, dtype=torch.int32)
        mult = torch.randint(0, 100000, (L, N), generator=g, dtype=torch.int64)
        vocab = torch.randint(100000, 1000000, (L, N - 1, M), generator=g, dtype=torch.int32)
        offsets = (vocab.reshape(L, -1).cumsum(1) - vocab.reshape(L, -1)).to(torch.int32)
    got = tk1.engram.engram_hash(ids, mult, vocab, offsets)
    assert got.dtype == torch.int32 and got.shape == (L, T, (N - 1) * M)
    assert torch.equal(got, hash_oracle(ids, mult, vocab, offsets))
    assert torch.equal(tk.engram.engram_hash(ids, mult, vocab, offsets), got)


def gate_inputs(T=5, hc=4, D=64):
    x, k, v = bf16(T, hc, D), bf16(T, hc, D), bf16(T, D)
    wh, we = bf16(hc, D), bf16(hc, D)
    return x, k, v, wh, we


def test_fused_weight_is_the_exact_product():
    _, _, _, wh, we = gate_inputs()
    got = tk1.engram.fused_weight(wh, we)
    assert got.dtype == torch.float32 and torch.equal(got, (wh.double() * we.double()).float())


def test_zero_row_takes_the_positive_root_and_the_no_save_form_has_the_same_bits():
    x, k, v, wh, we = gate_inputs()
    x[1] = 0                            # dot = 0, z = 0: TileKernels' kernel takes +sqrt(clamp)
    w = ops.fused_weight(wh, we)
    clamp = 0.25
    out, dot, gate, rstd_x, rstd_k = tk1.engram.engram_gate_fwd(x, k, v, w, 1e-20, clamp)
    assert bool((dot[1] == 0).all())
    want = 1 / (1 + math.exp(-math.sqrt(clamp)))
    torch.testing.assert_close(gate[1], torch.full_like(gate[1], want), rtol=1e-6, atol=0)
    lean = tk1.engram.engram_gate_fwd(x, k, v, w, 1e-20, clamp, save_for_backward=False)
    assert lean[1:] == (None, None, None, None)
    assert torch.equal(lean[0].view(torch.int16), out.view(torch.int16))


def test_clamp_edge_holds_the_gate_and_stops_its_gradient():
    """|z| under the clamp: every such gate is sigmoid(+-sqrt(clamp)) and its gradient is zero, so grad_k is
    0 and grad_x is grad_out there, bit for bit."""
    x, k, v, wh, we = gate_inputs(T=8)
    w = ops.fused_weight(wh, we)
    clamp = 0.5
    out, dot, gate, rstd_x, rstd_k = ops.engram_gate_fwd(x, k, v, w, clamp_value=clamp)
    z = dot * rstd_x * rstd_k / math.sqrt(x.shape[-1])
    inside = z.abs() < 0.9 * clamp
    assert bool(inside.any()) and bool((~inside).any())
    for sign in (1, -1):
        held = gate[inside & (sign * z >= 0)]
        torch.testing.assert_close(held, torch.full_like(held, 1 / (1 + math.exp(-sign * math.sqrt(clamp)))),
                                   rtol=1e-6, atol=0)
    go = bf16(*x.shape)
    grad_x, grad_k, grad_v, grad_w = ops.engram_gate_bwd(go, x, k, v, w, dot, gate, rstd_x, rstd_k, clamp_value=clamp)
    assert bool((grad_k[inside] == 0).all())
    assert torch.equal(grad_x[inside].view(torch.int16), go[inside].view(torch.int16))


def gate_f64(x, k, v, wh, we, clamp, eps):
    """The gate in float64 from its definition (RMSNorm, scaled dot, signed square root, sigmoid)."""
    D = x.shape[-1]
    rx = torch.rsqrt((x * x).mean(-1) + eps)
    rk = torch.rsqrt((k * k).mean(-1) + eps)
    z = (x * (wh * we) * k).sum(-1) * rx * rk / math.sqrt(D)
    s = torch.where(z < 0, -1.0, 1.0) * torch.sqrt(torch.clamp(z.abs(), min=clamp))
    return x + torch.sigmoid(s)[..., None] * v[..., None, :]


def calc_diff(a, b):
    """TileKernels' normwise difference: 1 - 2 sum(a b) / sum(a^2 + b^2), in float64."""
    a, b = a.detach().double(), b.detach().double()
    den = (a * a + b * b).sum()
    return float(1 - 2 * (a * b).sum() / den) if den else 0.0


def test_composite_gradients_against_float64_autograd_and_deterministic():
    """bf16 results and gradients: a relative error of about 2^-9 per element gives calc_diff ~ 1e-6, so
    the bound is 1e-5 (the weight gradients are float32, far closer)."""
    x, k, v, wh, we = gate_inputs(T=2 * 3, hc=4, D=64)
    x, k, v = x.reshape(2, 3, 4, 64), k.reshape(2, 3, 4, 64), v.reshape(2, 3, 64)
    clamp, eps = 1e-6, 1e-20
    leaves = [t.clone().requires_grad_() for t in (x, k, v, wh, we)]
    out = tk1.modeling.engram.engram_gate(*leaves, clamp, eps)
    go = bf16(*out.shape)
    out.backward(go)
    ref_leaves = [t.double().requires_grad_() for t in (x, k, v, wh, we)]
    ref = gate_f64(*ref_leaves, clamp, eps)
    ref.backward(go.double())
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    assert calc_diff(out, ref) < 1e-5
    for got, want in zip(leaves, ref_leaves):
        assert got.grad.shape == got.shape
        assert calc_diff(got.grad, want.grad) < 1e-5, calc_diff(got.grad, want.grad)
    first = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    tk1.modeling.engram.engram_gate(*leaves, clamp, eps).backward(go)
    for a, t in zip(first, leaves):
        assert torch.equal(a.view(torch.uint8), t.grad.view(torch.uint8))


def test_main_grad_is_accumulated_in_place():
    """A weight with a float32 `main_grad` gets its gradient added there (and None as its .grad)."""
    x, k, v, wh, we = gate_inputs(T=3)
    wh, we = wh.clone().requires_grad_(), we.clone().requires_grad_()
    start = torch.randn(wh.shape, generator=g)
    wh.main_grad = start.clone()
    go = bf16(*x.shape)
    tk1.modeling.engram.engram_gate(x, k, v, wh, we, 1e-6, 1e-20).backward(go)
    w = ops.fused_weight(wh.detach(), we.detach())
    fwd = ops.engram_gate_fwd(x, k, v, w)
    grad_w = ops.engram_gate_bwd(go, x, k, v, w, *fwd[1:], clamp_value=1e-6)[3]
    assert wh.grad is None and we.grad is not None
    assert torch.equal(wh.main_grad, start + grad_w * we.detach().float())


def test_grad_w_reduce_accumulates_in_place_in_order():
    P, hc, D = 5, 4, 32
    partial = torch.randn(P, hc, D, generator=g)
    wh, we = bf16(hc, D), bf16(hc, D)
    gh, ge = torch.randn(hc, D, generator=g), torch.randn(hc, D, generator=g)
    gh0, ge0 = gh.clone(), ge.clone()
    assert tk1.engram.grad_w_reduce(partial, wh, we, gh, ge) is None
    r = partial[0].clone()
    for p in range(1, P):
        r = r + partial[p]
    assert torch.equal(gh, gh0 + r * we.float()) and torch.equal(ge, ge0 + r * wh.float())
    assert tk.engram.grad_w_reduce is tk1.engram.grad_w_reduce
    with pytest.raises(TypeError, match="grad_weight_embed.*float32"):        # TileKernels types them float32
        tk.engram.grad_w_reduce(partial, wh, we, gh, ge.bfloat16())


def test_backward_partials_sum_to_the_gradient():
    """grad_w_partial is [1, hc, D], already reduced in block order: TileKernels' recipe (sum over the first
    dim, then times the other weight) gives the gradient; a second call gives the same bits."""
    x, k, v, wh, we = gate_inputs(T=7)
    w = ops.fused_weight(wh, we)
    fwd = ops.engram_gate_fwd(x, k, v, w)
    go = bf16(*x.shape)
    args = (go, x, k, v, w, *fwd[1:], 1e-6)
    a, b = tk1.engram.engram_gate_bwd(*args), tk1.engram.engram_gate_bwd(*args)
    assert a[3].shape == (1, 4, 64)
    for s, t in zip(a, b):
        assert torch.equal(s.view(torch.uint8), t.view(torch.uint8))


def test_nn_engram_gate_is_the_composite():
    import tkgen.nn as nn
    x, k, v, wh, we = gate_inputs(T=4)
    mod = nn.EngramGate(4, 64)
    with torch.no_grad():
        mod.weight_hidden.copy_(wh)
        mod.weight_embed.copy_(we)
    xs = x.clone().requires_grad_()
    out = mod(xs, k, v)
    want = tk1.modeling.engram.engram_gate(x, k, v, wh, we, 1e-6, 1e-20)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    out.float().sum().backward()
    assert xs.grad.shape == x.shape and mod.weight_hidden.grad.shape == wh.shape


def test_in_place_op_declares_what_it_mutates():
    """grad_w_reduce writes into its accumulators (`into:`): torch.library's schema says so (mutates_args),
    and opcheck holds the op's eager, fake and dispatcher forms to it."""
    P, hc, D = 3, 2, 16
    args = (torch.randn(P, hc, D, generator=g), bf16(hc, D), bf16(hc, D), torch.randn(hc, D, generator=g),
            torch.randn(hc, D, generator=g))
    schema = str(torch.ops.tkgen.grad_w_reduce.default._schema)
    assert "Tensor(a3!) grad_weight_hidden" in schema and "Tensor(a4!) grad_weight_embed" in schema
    assert schema.endswith("-> ()")
    torch.library.opcheck(torch.ops.tkgen.grad_w_reduce.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_composite_under_torch_compile():
    """fullgraph: the forward and the backward trace through the torch.library ops (grad_w_reduce's
    mutation included) and give eager's bits."""
    import tkgen.nn.functional as F
    x, k, v, wh, we = gate_inputs(T=3)
    leaves = [t.clone().requires_grad_() for t in (x, k, v, wh, we)]
    out = torch.compile(F.engram_gate, backend="aot_eager", fullgraph=True)(*leaves)
    out.float().sum().backward()
    compiled = [t.grad for t in leaves]
    eager = [t.clone().requires_grad_() for t in (x, k, v, wh, we)]
    want = F.engram_gate(*eager)
    want.float().sum().backward()
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    for a, t in zip(compiled, eager):
        assert torch.equal(a.view(torch.uint8), t.grad.view(torch.uint8))


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("buffer_dtype", [torch.bfloat16, torch.float32])
def test_sinkhorn_momentum_update_in_place(nesterov, buffer_dtype):
    """The buffer takes fma(m, b, (1 - b) g) in its dtype; the result is float32, from the unrounded
    update (an fma computed exactly in float64 and rounded once: the CPU kernel's fma, see numerics.md)."""
    n, b = 2048 + 256, 0.95
    grad = torch.randn(n, generator=g)
    buf = torch.randn(n, generator=g).to(buffer_dtype)
    m0 = buf.clone()
    out = tk.engram.engram_sinkhorn_momentum_update(grad, buf, b) if nesterov else \
        tk.engram.engram_sinkhorn_momentum_update(grad, buf, b, nesterov=False)
    f32 = lambda v: torch.tensor(v, dtype=torch.float32).double()  # noqa: E731
    c = (f32(1.0) - f32(b)).float().double()
    m = (m0.double() * f32(b) + (c.float() * grad).double()).float()
    look = (grad.double() * c + (f32(b).float() * m).double()).float()
    assert torch.equal(buf, m.to(buffer_dtype))
    assert out.dtype == torch.float32 and torch.equal(out, look if nesterov else m)


def test_hash_image_tokens_are_minus_one():
    """2.1.0's image_token_mask: image tokens (True) get -1 in every column; the others hash as without it."""
    T, L, N, M = 7, 2, 3, 2
    ids = torch.randint(0, 100000, (T, N), generator=g, dtype=torch.int32)
    mult = torch.randint(0, 100000, (L, N), generator=g, dtype=torch.int64)
    vocab = torch.randint(100000, 1000000, (L, N - 1, M), generator=g, dtype=torch.int32)
    offsets = torch.randint(0, 1000, (L, (N - 1) * M), generator=g, dtype=torch.int32)
    mask = torch.tensor([True, False, False, True, False, True, False])
    got = tk.engram.engram_hash(ids, mult, vocab, offsets, image_token_mask=mask)
    want = hash_oracle(ids, mult, vocab, offsets)
    want[:, mask] = -1
    assert torch.equal(got, want)


# TileKernels 2.1.0: the gate over a packed kv, image tokens, in place; the Sinkhorn kernels.

def packed_kv(T, hc, D):
    """kv [T, hc + 1, D] as a view into a wider buffer: strided rows, k and v then views of a view."""
    return bf16(T, hc + 3, D)[:, 1:hc + 2]


def gate_v2_inputs(T=6, hc=4, D=64):
    x, _, _, wh, we = gate_inputs(T, hc, D)
    return x, packed_kv(T, hc, D), ops.fused_weight(wh, we)


def bits(t):
    return t.contiguous().view(torch.uint8)


def test_packed_kv_views_give_the_bits_of_separate_k_and_v():
    """2.1.0's forward and backward read k = kv[:, :hc] and v = kv[:, hc] through their strides: the bits of
    the first release's ops on contiguous copies; grad_kv packs grad_k and grad_v the same way."""
    x, kv, w = gate_v2_inputs()
    hc = x.shape[1]
    assert not kv.is_contiguous() and not kv[:, hc].is_contiguous()
    k, v = kv[:, :hc].contiguous(), kv[:, hc].contiguous()
    want = ops.engram_gate_fwd(x, k, v, w, eps=1e-20, clamp_value=1e-6)
    got = tk.engram.engram_gate_fwd(x, kv, w, 1e-20, 1e-6)
    for a, b in zip(got, want):
        assert torch.equal(bits(a), bits(b))
    lean = tk.engram.engram_gate_fwd(x, kv, w, 1e-20, 1e-6, save_for_backward=False)
    assert lean[1:] == (None, None, None, None) and torch.equal(bits(lean[0]), bits(want[0]))
    go = bf16(*x.shape)
    grad_x, grad_k, grad_v, grad_w = ops.engram_gate_bwd(go, x, k, v, w, *want[1:], clamp_value=1e-6)
    gx, gkv, partial = tk.engram.engram_gate_bwd(go, x, kv, w, *got[1:], 1e-6)
    assert gkv.shape == kv.shape and partial.shape == (1, hc, x.shape[2])
    assert torch.equal(bits(gx), bits(grad_x)) and torch.equal(bits(partial[0]), bits(grad_w))
    assert torch.equal(bits(gkv[:, :hc]), bits(grad_k)) and torch.equal(bits(gkv[:, hc]), bits(grad_v))


def test_image_tokens_bypass_the_gate_forward_and_in_place():
    x, kv, w = gate_v2_inputs(T=7)
    mask = torch.tensor([True, False, True, False, False, True, False])
    plain = tk.engram.engram_gate_fwd(x, kv, w, 1e-20, 1e-6)
    got = tk.engram.engram_gate_fwd(x, kv, w, 1e-20, 1e-6, image_token_mask=mask)
    assert torch.equal(bits(got[0][mask]), bits(x[mask]))           # x unchanged, bit for bit
    for a, b in zip(got, plain):                                    # the other tokens as without the mask
        assert torch.equal(bits(a[~mask]), bits(b[~mask]))
    with pytest.raises(ValueError, match="`inplace` is incompatible with save_for_backward"):
        tk.engram.engram_gate_fwd(x.clone(), kv, w, 1e-20, 1e-6, image_token_mask=mask, inplace=True)
    xs = x.clone()
    res = tk.engram.engram_gate_fwd(xs, kv, w, 1e-20, 1e-6, save_for_backward=False, image_token_mask=mask,
                                    inplace=True)
    assert res[0] is xs and res[1:] == (None, None, None, None)
    assert torch.equal(bits(xs), bits(got[0]))


def test_image_tokens_backward_whatever_their_saved_values():
    """An image token: grad_x = grad_out and grad_kv = +0 bit for bit, and no share of the weight gradient,
    even where its saved intermediates are garbage (TileKernels' forward leaves them unwritten): the
    weight gradient has the bits of the unmasked backward with those tokens' grad_out zeroed."""
    x, kv, w = gate_v2_inputs(T=7)
    mask = torch.tensor([False, True, True, False, False, False, True])
    fwd = tk.engram.engram_gate_fwd(x, kv, w, 1e-20, 1e-6)
    go = bf16(*x.shape)
    junk = [t.clone() for t in fwd[1:]]
    for t, bad in zip(junk, (float("nan"), 2.0, float("inf"), 0.0)):
        t[mask] = bad
    gx, gkv, partial = tk.engram.engram_gate_bwd(go, x, kv, w, *junk, 1e-6, image_token_mask=mask)
    assert torch.equal(bits(gx[mask]), bits(go[mask]))
    assert not bits(gkv[mask]).any()
    go0 = go.clone()
    go0[mask] = 0
    plain = tk.engram.engram_gate_bwd(go0, x, kv, w, *fwd[1:], 1e-6)
    assert torch.equal(bits(gx[~mask]), bits(plain[0][~mask])) and torch.equal(bits(gkv[~mask]), bits(plain[1][~mask]))
    assert torch.equal(bits(partial), bits(plain[2]))


def gate_f64_masked(x, kv, wh, we, clamp, eps, mask):
    hc, D = x.shape[-2:]
    kv = kv.reshape(*kv.shape[:-1], hc + 1, D)
    out = gate_f64(x, kv[..., :hc, :], kv[..., hc, :], wh, we, clamp, eps)
    return torch.where(mask[..., None, None], x, out)


def test_composite_2_1_0_against_float64_autograd():
    """modeling.engram.engram_gate over hidden_states [2, 3, hc, D], kv [2, 3, (hc + 1) * D] and an image
    mask: output and gradients as the first release's composite (calc_diff below 1e-5, the bound argued
    there); image tokens pass x and its gradient through, with a zero grad_kv; two backward passes give
    the same bits."""
    hc, D = 4, 64
    x = bf16(2, 3, hc, D)
    kv = bf16(2, 3, (hc + 1) * D)
    wh, we = bf16(hc, D), bf16(hc, D)
    mask = torch.tensor([[False, True, False], [True, False, False]])
    clamp, eps = 1e-6, 1e-20
    leaves = [t.clone().requires_grad_() for t in (x, kv, wh, we)]
    out = tk.modeling.engram.engram_gate(*leaves, clamp, eps, mask)
    go = bf16(*out.shape)
    out.backward(go)
    ref_leaves = [t.double().requires_grad_() for t in (x, kv, wh, we)]
    ref = gate_f64_masked(*ref_leaves, clamp, eps, mask)
    ref.backward(go.double())
    assert out.dtype == torch.bfloat16 and out.shape == x.shape and torch.equal(bits(out[mask]), bits(x[mask]))
    assert calc_diff(out, ref) < 1e-5
    for got, want in zip(leaves, ref_leaves):
        assert got.grad.shape == got.shape
        assert calc_diff(got.grad, want.grad) < 1e-5, calc_diff(got.grad, want.grad)
    assert not bits(leaves[1].grad[mask]).any()
    first = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    tk.modeling.engram.EngramGateFn.apply(*leaves, clamp, eps, mask).backward(go)
    for a, t in zip(first, leaves):
        assert torch.equal(bits(a), bits(t.grad))


def rel_err(got, want):
    return float(((got.double() - want).abs() / want.abs()).max())


@pytest.mark.parametrize("eps", [1e-20, 0.25])
def test_sinkhorn_iteration_against_float64(eps):
    """Four steps of the factored iteration X = diag(r) M diag(c) through TileKernels' API (step: row norms,
    r updated in place, column partials; step_reduce into col_sumsq; the caller's c /= sqrt(col_sumsq) + eps),
    then finalize with alpha = sqrt(D), against the same iteration written in float64 from its definition.
    Each float32 value passes through sums of at most D = 96 terms of one sign (relative error at most about
    D * 2^-24 = 5.7e-6, typically far less) and a few roundings; the bound is 1e-5 (measured: below 5e-7)."""
    R, D = 37, 96
    M = torch.randn(R, D, generator=g) * (0.05 if eps > 1e-3 else 1.0)     # eps matters: row norms near 0.5
    r, c = torch.rand(R, generator=g) + 0.5, torch.rand(D, generator=g) + 0.5
    rf, cf = r.double(), c.double()
    col_sumsq = torch.full((D,), float("nan"))
    for _ in range(4):
        row_scale = r
        norm, partial = tk.engram.engram_sinkhorn_step(M, r, c, eps)
        assert r is row_scale and partial.shape == (1, D) and norm.shape == (R,)
        assert tk.engram.engram_sinkhorn_step_reduce(partial, col_sumsq) is None
        assert torch.equal(col_sumsq, partial.sum(0))
        X = rf[:, None] * M.double() * cf
        n = X.square().sum(1).sqrt()
        want_colsq = (X / (n + eps)[:, None]).square().sum(0)
        rf = rf / (n + eps)
        assert rel_err(norm, n) < 1e-5 and rel_err(r, rf) < 1e-5 and rel_err(col_sumsq, want_colsq) < 1e-5
        c = c / (col_sumsq.sqrt() + eps)
        cf = cf / (want_colsq.sqrt() + eps)
    alpha = math.sqrt(D)
    out = tk.engram.engram_sinkhorn_finalize(M, r, c, eps, alpha)
    X = rf[:, None] * M.double() * cf
    want = X * (alpha / (X.square().sum(1, keepdim=True).sqrt() + eps))
    assert out.shape == (R, D) and rel_err(out, want) < 1e-5


def test_sinkhorn_finalize_into_out_and_reduce_in_order():
    R, D = 5, 16
    M, r, c = torch.randn(R, D, generator=g), torch.rand(R, generator=g), torch.rand(D, generator=g)
    want = tk.engram.engram_sinkhorn_finalize(M, r, c, 1e-20, 4.0)
    out = torch.full((R, D), float("nan"))
    assert tk.engram.engram_sinkhorn_finalize(M, r, c, 1e-20, 4.0, out=out) is out
    assert torch.equal(out, want)
    wide = torch.full((R, 2 * D), float("nan"))
    got = tk.engram.engram_sinkhorn_finalize(M, r, c, 1e-20, 4.0, out=wide[:, :D])
    assert got.data_ptr() == wide.data_ptr() and torch.equal(wide[:, :D], want) and wide[:, D:].isnan().all()
    partial = torch.randn(3, D, generator=g)
    col_sumsq = torch.empty(D)
    tk.engram.engram_sinkhorn_step_reduce(partial, col_sumsq)
    assert torch.equal(col_sumsq, (-0.0 + partial[0]) + partial[1] + partial[2])


def test_strided_k_and_v_load_16_bytes_at_a_time_and_misaligned_views_are_refused():
    """The kernels assume the strides of k and v are multiples of 8 bf16 (as a contiguous tensor's are at
    D = 2560), so that the sm_90a source loads them 16 bytes at a time, as it does hidden_states; the op
    refuses a view that breaks the assumption (a row stride of D + 1), and the compat layer copies it."""
    import re
    from tkgen import registry
    from tkgen.runtime.compile import lower_source
    from tkgen.runtime.kernels import kernel_module
    src = lower_source(kernel_module(registry.op_package("engram_gate_fwd"), "sm90"), "true", (4, 2560, 1e-20, 1e-6))
    for name in ("hidden_states", "k", "v"):
        assert re.search(rf"\*\(uint4\*\)\({name} \+", src), name
    x, _, w = gate_v2_inputs(T=3, hc=2, D=16)
    kv = bf16(3, 3, 17)[..., :16]
    with pytest.raises(ValueError, match="`k` must start on 16 bytes and have strides that are multiples of 8"):
        ops.engram_gate_fwd(x, kv[:, :2], kv[:, 2], w)
    want = ops.engram_gate_fwd(x, kv[:, :2].contiguous(), kv[:, 2].contiguous(), w)
    for a, b in zip(tk.engram.engram_gate_fwd(x, kv, w, 1e-20, 1e-6), want):
        assert torch.equal(bits(a), bits(b))


def test_the_inference_form_is_held_to_the_saving_form_s_bits():
    """A case the 2,000-example campaign found (2026-12-07): the inference form's output (dot, rstd_x and rstd_k
    not written) was replayed by the inference form's reference, which has no stores of them and so ignored the
    saving kernel's values: its own sum of x * w * k moved one bf16 output by a unit in the last place. The
    kernels of both forms give the same bits; the check now replays the saving form's reference."""
    from tkgen.testing import check as C
    from tkgen import registry
    case = {"dims": {"D": 64, "HC": 4, "T": 5},
            "params": {"clamp_value": 1e-06, "eps": 1e-06, "save_for_backward": False},
            "shapes": {"hidden_states": [5, 4, 64], "image_token_mask": [5], "k": [5, 4, 64], "v": [5, 64],
                       "weight_fused": [4, 64]},
            "inputs": {"hidden_states": {"dtype": "bf16", "scale_exp": 1, "seed": 1830,
                                         "specials": [["subnormal", 4624, 0, 3]], "style": "discrete"},
                       "image_token_mask": None,
                       "k": {"dtype": "bf16", "scale_exp": -17, "seed": 131071, "specials": [], "style": "normal"},
                       "v": {"dtype": "bf16", "scale_exp": 0, "seed": 159, "specials": [], "style": "normal"},
                       "weight_fused": {"dtype": "fp32", "scale_exp": 16, "seed": 2147483647, "specials": [],
                                        "style": "normal"}}}
    C.run_case("engram_gate_fwd", case, "cpu")
    op = registry.op_package("engram_gate_fwd").OP
    given = {"dot", "rstd_x", "rstd_k"}
    assert C.writing_params(op, case["params"], given) == {**case["params"], "save_for_backward": True}
    saving = {**case["params"], "save_for_backward": True}
    assert C.writing_params(op, saving, given) is saving
