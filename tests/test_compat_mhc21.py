"""TileKernels 2.1.0's `tile_kernels.mhc` entry points through tkgen.compat.tilekernels.mhc, called as 2.1.0's
callers call them (destination-passing: preallocated outputs), with the shapes and parameters of TileKernels'
mHC tests (operators-v1.md 7.x; operators-v2.md 2.19 keeps them) at CPU-sized token counts, against the
documented semantics written here in float64 torch; backwards against float64 autograd of those formulas.
Tolerances are those of TileKernels' tests (operators-v1.md 7.x), exact where the doc's formula is a copy."""
import pytest
import torch

import tkgen.compat.tilekernels as tk

MHC = tk.mhc
GEN = torch.Generator().manual_seed(2101)
BF16_TOL = dict(rtol=1.6e-2, atol=1e-5)          # assert_close's defaults for bfloat16
F32_TOL = dict(rtol=1.3e-6, atol=1e-5)           # and for float32
N1 = 256                                         # TileKernels' tests: n1 in {1024, 4096}; fewer tokens here


def randn(*shape):
    return torch.randn(*shape, generator=GEN)


def close(got, want, **tol):
    torch.testing.assert_close(got.double(), want.double(), **tol)


def close_bf16(got, want, **tol):
    """`got` (bf16) against float64 `want` rounded once to bf16, as TileKernels' tests compare."""
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want.to(torch.bfloat16), **(tol or BF16_TOL))


# --- float64 semantics (operators-v1.md 7.x, operators-v2.md 2.19) ---------------------------------------------

def head64(x, scale, base, pre_eps):
    return torch.sigmoid(x * scale[0] + base) + pre_eps


def split64(x, scale, base, m, post_mult, pre_eps):
    pre = torch.sigmoid(x[:, :m] * scale[0] + base[:m]) + pre_eps
    post = torch.sigmoid(x[:, m:2 * m] * scale[1] + base[m:2 * m]) * post_mult
    comb = x[:, 2 * m:] * scale[2] + base[2 * m:]
    return pre, post, comb


def sinkhorn64(x, repeat, eps):
    p = torch.softmax(x, -1) + eps
    p = p / (p.sum(-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        p = p / (p.sum(-1, keepdim=True) + eps)
        p = p / (p.sum(-2, keepdim=True) + eps)
    return p


def apply64(x, mix):
    return (mix[..., None] * x).sum(-2)


def post64(x, residual, post, comb):
    return post * x[..., None, :] + torch.einsum("...io,...id->...od", comb, residual)


def rmsnorm64(out_mul, sqrsum, group_size, eps):
    return (out_mul * torch.rsqrt(sqrsum / group_size + eps)[..., None]).sum(-2)


# --- expand ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n0", [1, 2])
@pytest.mark.parametrize("m, d", [(2, 1280), (4, 2560), (8, 1280)])
def test_expand_to_mhc(n0, m, d):
    """test_expand.py: m in {2, 4, 8}, D in {1280, 2560, 7168}: the forward a copy (bit for bit), the backward
    the stream sum (bf16 tolerance) against float64."""
    t = n0 * N1
    x = randn(t, d).bfloat16()
    o = torch.full((t, m, d), float("nan"), dtype=torch.bfloat16)
    assert MHC.expand_to_mhc_fwd(x, o) is None
    assert torch.equal(o, x[:, None, :].expand(t, m, d))
    g = randn(t, m, d).bfloat16()
    x_grad = torch.empty(t, d, dtype=torch.bfloat16)
    assert MHC.expand_to_mhc_bwd(g, x_grad) is None
    close_bf16(x_grad, g.double().sum(1))


# --- head mix --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n0", [1, 2])
def test_head_compute_mix_forward_and_backward(n0):
    """test_head_compute_mix: m = 4, pre_eps = 1e-2, rtol 1e-4 / atol 1e-5; the backward's per-SM partials
    add up (over their rows) to the float64 gradients."""
    t, m, num_sms = n0 * N1, 4, 132
    x, scale, base = randn(t, m), randn(1), randn(m)
    out = torch.empty(t, m)
    assert MHC.mhc_head_compute_mix_fwd(x, scale, base, out, 1e-2) is None
    close(out, head64(x.double(), scale.double(), base.double(), 1e-2), rtol=1e-4, atol=1e-5)

    g = randn(t, m)
    x64, s64, b64 = (v.double().requires_grad_(True) for v in (x, scale, base))
    want = torch.autograd.grad(head64(x64, s64, b64, 1e-2), (x64, s64, b64), g.double())
    x_grad = torch.empty(t, m)
    s_part, b_part = torch.full((num_sms, 1), 7.0), torch.full((num_sms, m), 7.0)
    assert MHC.mhc_head_compute_mix_bwd(g, x, scale, base, x_grad, s_part, b_part, num_sms) is None
    close(x_grad, want[0], rtol=1e-4, atol=1e-5)
    close(s_part.sum(0), want[1], rtol=1e-4, atol=1e-5)
    close(b_part.sum(0), want[2], rtol=1e-4, atol=1e-5)


# --- pre split mixes -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n0", [1, 2])
def test_pre_split_mixes_forward_and_backward(n0):
    """test_pre_split_mixes.py: m = 4, post_mult = 2.0, pre_eps = 1e-2; every output and gradient within
    rtol 1e-5 / atol 2e-5 of float64; comb written as 2.1.0's (T, m * m)."""
    t, m, pm, eps = n0 * N1, 4, 2.0, 1e-2
    m3 = m * (m + 2)
    x, scale, base = randn(t, m3), randn(3), randn(m3)
    pre, post, comb = torch.empty(t, m), torch.empty(t, m), torch.empty(t, m * m)
    assert MHC.mhc_pre_split_mixes_fwd(x, scale, base, pre, post, comb, pm, eps) is None
    want = split64(x.double(), scale.double(), base.double(), m, pm, eps)
    for got, w in zip((pre, post, comb), want):
        close(got, w, rtol=1e-5, atol=2e-5)

    gs = randn(t, m), randn(t, m), randn(t, m * m)
    x64, s64, b64 = (v.double().requires_grad_(True) for v in (x, scale, base))
    wg = torch.autograd.grad(split64(x64, s64, b64, m, pm, eps), (x64, s64, b64), [g.double() for g in gs])
    x_grad, s_grad, b_grad = torch.empty(t, m3), torch.empty(3), torch.empty(m3)
    assert MHC.mhc_pre_split_mixes_bwd(*gs, x, post, scale, base, x_grad, s_grad, b_grad, pm) is None
    # the sums over tokens: TileKernels' tolerance relative to the largest element
    close(x_grad, wg[0], rtol=1e-5, atol=2e-5)
    close(s_grad, wg[1], rtol=1e-5, atol=2e-5 * max(1.0, float(wg[1].abs().max())))
    close(b_grad, wg[2], rtol=1e-5, atol=2e-5 * max(1.0, float(wg[2].abs().max())))


# --- Sinkhorn --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n0, n1", [(1, 1), (1, N1), (2, N1)])
def test_sinkhorn_forward_and_backward(n0, n1):
    """test_sinkhorn.py: m = 4, repeat 10, eps 1e-6, randn input and gradient; float32's default tolerance."""
    t, m, repeat, eps = n0 * n1, 4, 10, 1e-6
    x = randn(t, m, m)
    out = torch.empty(t, m, m)
    assert MHC.mhc_sinkhorn_fwd(x, out, repeat, eps) is None
    close(out, sinkhorn64(x.double(), repeat, eps), **F32_TOL)

    g = randn(t, m, m)
    x64 = x.double().requires_grad_(True)
    want = torch.autograd.grad(sinkhorn64(x64, repeat, eps), x64, g.double())[0]
    grad_input = torch.empty(t, m, m)
    assert MHC.mhc_sinkhorn_bwd(g, x, grad_input, repeat, eps) is None
    close(grad_input, want, **F32_TOL)


# --- pre apply mix ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n0", [1, 2])
@pytest.mark.parametrize("d", [1280, 2560, 7680])
def test_pre_apply_mix_forward_and_backward(n0, d):
    """test_pre_apply_mix.py: m = 4, x = sigmoid(randn) bf16, mix = softmax(randn) over the streams, the
    x-gradient buffer starting from zeros (and, here, from a gradient already there: 2.1.0 adds into it);
    atol 1e-2 / rtol 1e-3 for the output and both gradients."""
    t, m = n0 * 64, 4
    x = torch.sigmoid(randn(t, m, d)).bfloat16()
    mix = torch.softmax(randn(t, m), -1)
    o = torch.empty(t, d, dtype=torch.bfloat16)
    assert MHC.mhc_pre_apply_mix_fwd(x, mix, o) is None
    tol = dict(atol=1e-2, rtol=1e-3)
    close_bf16(o, apply64(x.double(), mix.double()), **tol)

    g = randn(t, d).bfloat16()
    x64, mix64 = x.double().requires_grad_(True), mix.double().requires_grad_(True)
    wx, wm = torch.autograd.grad(apply64(x64, mix64), (x64, mix64), g.double())
    for start in (torch.zeros(t, m, d, dtype=torch.bfloat16), randn(t, m, d).bfloat16()):
        x_grad = start.clone()
        mix_grad = MHC.mhc_pre_apply_mix_bwd(g, x, mix, x_grad)
        close_bf16(x_grad, start.double() + wx, **tol)
        close(mix_grad, wm, **tol)
        assert mix_grad.shape == (t, m) and mix_grad.dtype == torch.float32


# --- post ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n0", [1, 2])
@pytest.mark.parametrize("d", [1280, 2560, 7168])
def test_post_forward_and_backward(n0, d):
    """test_post.py: all randn; the output, d_x and d_residual within bf16's default tolerance, d_post and
    d_comb within atol = rtol = 1e-4; out= is written and returned."""
    n1, m = 64, 4
    x, residual = randn(n0, n1, d).bfloat16(), randn(n0, n1, m, d).bfloat16()
    post, comb = randn(n0, n1, m, 1), randn(n0, n1, m, m)
    want = post64(x.double(), residual.double(), post.double(), comb.double())
    out = MHC.mhc_post_fwd(x, residual, post, comb)
    assert out.shape == residual.shape and out.dtype == torch.bfloat16
    close_bf16(out, want)
    given = torch.empty_like(residual)
    assert MHC.mhc_post_fwd(x, residual, post, comb, out=given) is given
    assert torch.equal(given, out)

    d_o = randn(n0, n1, m, d).bfloat16()
    ins = [v.double().requires_grad_(True) for v in (x, residual, post, comb)]
    wants = torch.autograd.grad(post64(*ins), ins, d_o.double())
    got = MHC.mhc_post_bwd(x, residual, post, comb, d_o)
    assert [g.shape for g in got] == [x.shape, residual.shape, post.shape, comb.shape]
    close_bf16(got[0], wants[0])
    close_bf16(got[1], wants[1])
    close(got[2], wants[2], atol=1e-4, rtol=1e-4)
    close(got[3], wants[3], atol=1e-4, rtol=1e-4)


# --- split-K partials and RMSNorm ------------------------------------------------------------------------------

def partials(residual, fn, n_splits, groups):
    """What the split-K GEMM outside TileKernels writes (`torch.mhc_pre_norm_fn_partials_ref`'s scheme): the
    reduction axis (m * D per token) cut into `groups` RMS groups and each group into n_splits partials,
    out_mul_split[s, t, g] = r_(g, s) @ fn_(g, s)^T and sqrsum_split[s, t, g] = sum of r_(g, s)^2, in float32."""
    t, k = residual.shape
    r = residual.float().reshape(t, groups, n_splits, k // groups // n_splits)
    f = fn.reshape(fn.shape[0], groups, n_splits, k // groups // n_splits)
    out_mul = torch.einsum("tgsk,ngsk->stgn", r, f).contiguous()
    sqrsum = (r * r).sum(-1).permute(2, 0, 1).contiguous()
    return out_mul, sqrsum


@pytest.mark.parametrize("n1, d, groups", [(13, 1280, 1), (48, 2560, 1), (512, 1280, 1), (48, 1280, 2)])
def test_reduce_partials_and_rmsnorm_forward_and_backward(n1, d, groups):
    """test_norm_fn.py's second test (n1 in {13, 48, 512}, D in {1280, 2560, ...}, n_splits = 16, eps 1e-6,
    atol = rtol = 1e-3), here the 2.1.0 kernel over the GEMM's split-K partials, with G = 1 and G = 2 RMS
    groups: out_mul and sqrsum against the float64 sums of the partials (rtol 1e-5), out against float64;
    the backward against float64 autograd of the forward in out_mul and sqrsum."""
    m, n_splits, eps = 4, 16, 1e-6
    m3, k = m * (m + 2), m * d
    residual = (randn(n1, m, d) * (1 + 0.01 * torch.arange(m))[:, None]).bfloat16().reshape(n1, k)
    fn = randn(m3, k) * 1e-4 * (1 + 0.01 * torch.arange(m).repeat_interleave(d))
    oms, sqs = partials(residual, fn, n_splits, groups)
    gsize = k // groups
    out_mul, sqrsum, out = torch.empty(n1, groups, m3), torch.empty(n1, groups), torch.empty(n1, m3)
    assert MHC.mhc_reduce_partials_and_rmsnorm_fwd(oms, sqs, out_mul, sqrsum, out, gsize, eps, n_splits) is None
    om64, sq64 = oms.double().sum(0), sqs.double().sum(0)
    close(out_mul, om64, rtol=1e-5, atol=1e-5 * float(om64.abs().max()))
    close(sqrsum, sq64, rtol=1e-5, atol=0)
    close(out, rmsnorm64(om64, sq64, gsize, eps), rtol=1e-3, atol=1e-3)

    g = randn(n1, m3)
    om, sq = out_mul.double().requires_grad_(True), sqrsum.double().requires_grad_(True)
    w_om, w_sq = torch.autograd.grad(rmsnorm64(om, sq, gsize, eps), (om, sq), g.double())
    om_grad, sq_grad = torch.empty(n1, groups, m3), torch.empty(n1, groups)
    assert MHC.mhc_reduce_partials_and_rmsnorm_bwd(g, out_mul, sqrsum, om_grad, sq_grad, gsize, eps) is None
    close(om_grad, w_om, rtol=1e-5, atol=1e-6 * float(w_om.abs().max()))
    close(sq_grad, w_sq, rtol=1e-4, atol=1e-5 * float(w_sq.abs().max()))


# --- fn and norm-weight merge ----------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [1280, 2560, 7168])
def test_fn_normw_merge_forward_and_backward(d):
    """test_norm_fn.py's weights (fn = randn * 1e-4 * (1 + 0.01 * stream), normw = randn * 0.1 + 1, D in {1280,
    2560, 7168}, m = 4): the merge is one float32 product (bit for bit with float64's rounded once); the
    backward adds into the gradients given (starting from zeros and from earlier gradients), against float64
    autograd of fn * normw plus what they held, and bit for bit against the documented float32 order."""
    m = 4
    m3, k = m * (m + 2), m * d
    fn = randn(m3, k) * 1e-4 * (1 + 0.01 * torch.arange(m).repeat_interleave(d))
    normw = randn(k) * 0.1 + 1
    out_fn = torch.empty(m3, k)
    assert MHC.mhc_fn_normw_merge_fwd(fn, normw, out_fn) is None
    assert torch.equal(out_fn, (fn.double() * normw.double()).float())

    g = randn(m3, k) * 1e-2
    f64, w64 = fn.double().requires_grad_(True), normw.double().requires_grad_(True)
    wf, ww = torch.autograd.grad(f64 * w64, (f64, w64), g.double())
    for fa, wa in ((torch.zeros(m3, k), torch.zeros(k)), (randn(m3, k) * 1e-3, randn(k) * 1e-3)):
        fn_grad, normw_grad = fa.clone(), wa.clone()
        assert MHC.mhc_fn_normw_merge_bwd(fn, normw, g, fn_grad, normw_grad) is None
        close(fn_grad, fa.double() + wf, rtol=1e-6, atol=1e-6 * float(wf.abs().max()))
        close(normw_grad, wa.double() + ww, rtol=1e-5, atol=1e-5 * float(ww.abs().max()))
        r = torch.zeros(k)
        for j in range(m3):
            r = r + g[j] * fn[j]
        assert torch.equal(fn_grad, fa + g * normw) and torch.equal(normw_grad, wa + r)


# --- big fuse and multilayer recompute ------------------------------------------------------------------------

@pytest.mark.parametrize("n1, d", [(512, 1280), (128, 2560), (64, 4096)])
def test_pre_big_fuse(n1, d):
    """test_pre_big_fuse.py: m = 4, eps 1e-6 everywhere, post_mult 1.0, repeat 10, scale and base randn * 0.1;
    torch.equal on all three outputs against the composite (reduce-partials-and-RMSNorm, split, Sinkhorn,
    apply-mix, each through its 2.1.0 entry point), here over 16 split-K partials; and against float64 (the
    partials' sums, then the documented formulas) within test_norm_fn.py's 1e-3 for the mixes."""
    m, n_splits, eps, repeat = 4, 16, 1e-6, 10
    m3, k = m * (m + 2), m * d
    residual = randn(n1, m, d).bfloat16()
    fn = randn(m3, k) * 1e-4
    oms, sqs = partials(residual.reshape(n1, k), fn, n_splits, 1)
    oms, sqs = oms[:, :, 0].contiguous(), sqs[:, :, 0].contiguous()
    scale, base = randn(3) * 0.1, randn(m3) * 0.1
    post, comb, layer_input = torch.empty(n1, m), torch.empty(n1, m * m), torch.empty(n1, d, dtype=torch.bfloat16)
    assert MHC.mhc_pre_big_fuse_fwd(oms, sqs, scale, base, residual, post, comb, layer_input, eps, eps, eps, 1.0,
                                    repeat, n_splits) is None

    mixes = torch.empty(n1, m3)
    MHC.mhc_reduce_partials_and_rmsnorm_fwd(oms[:, :, None], sqs[:, :, None], torch.empty(n1, 1, m3),
                                            torch.empty(n1, 1), mixes, k, eps, n_splits)
    pre_c, post_c, comb_c = torch.empty(n1, m), torch.empty(n1, m), torch.empty(n1, m, m)
    MHC.mhc_pre_split_mixes_fwd(mixes, scale, base, pre_c, post_c, comb_c, 1.0, eps)
    comb_s = torch.empty(n1, m, m)
    MHC.mhc_sinkhorn_fwd(comb_c, comb_s, repeat, eps)
    li = torch.empty(n1, d, dtype=torch.bfloat16)
    MHC.mhc_pre_apply_mix_fwd(residual, pre_c, li)
    assert torch.equal(post, post_c) and torch.equal(comb, comb_s.reshape(n1, m * m)) and torch.equal(layer_input, li)

    mixes64 = rmsnorm64(oms.double().sum(0)[:, None], sqs.double().sum(0)[:, None], k, eps)
    pre64, post64_, comb64 = split64(mixes64, scale.double(), base.double(), m, 1.0, eps)
    close(post, post64_, rtol=1e-3, atol=1e-3)
    close(comb, sinkhorn64(comb64.reshape(n1, m, m), repeat, eps).reshape(n1, m * m), rtol=1e-3, atol=1e-3)
    close_bf16(layer_input, apply64(residual.double(), pre64), atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize("layers, posts, d", [(1, 1, 2560), (3, 2, 2560), (3, 3, 2560), (10, 9, 4096),
                                              (10, 10, 1280)])
def test_multilayer_recompute(layers, posts, d):
    """test_multilayer_recompute.py: bs 1, m = 4, (L, P) with P in {L - 1, L}; torch.equal on every layer input
    and residual against mhc_pre_apply_mix_fwd and mhc_post_fwd called layer by layer (here 64 tokens)."""
    m, seq = 4, 64
    initial = randn(1, seq, m, d).bfloat16()
    pre = [torch.softmax(randn(1, seq, m, 1), -2) for _ in range(layers)]
    outs = [randn(1, seq, d).bfloat16() for _ in range(posts)]
    post = [torch.sigmoid(randn(1, seq, m, 1)) * 2 for _ in range(posts)]
    comb = [torch.softmax(randn(1, seq, m, m), -1) for _ in range(posts)]
    layer_inputs = [torch.empty(1, seq, d, dtype=torch.bfloat16) for _ in range(layers)]
    residuals = [torch.empty(1, seq, m, d, dtype=torch.bfloat16) for _ in range(posts)]
    assert MHC.mhc_multilayer_recompute(initial, pre, outs, post, comb, layer_inputs, residuals) is None

    r = initial
    for i in range(layers):
        li = torch.empty(seq, d, dtype=torch.bfloat16)
        MHC.mhc_pre_apply_mix_fwd(r.reshape(seq, m, d), pre[i].reshape(seq, m), li)
        assert torch.equal(layer_inputs[i].reshape(seq, d), li), i
        if i < posts:
            r = MHC.mhc_post_fwd(outs[i], r, post[i], comb[i])
            assert torch.equal(residuals[i], r), i
    with pytest.raises(ValueError, match="layer_output_list must hold"):
        k = layers + 1                                     # neither L - 1 nor L
        MHC.mhc_multilayer_recompute(initial, pre, [outs[0]] * k, [post[0]] * k, [comb[0]] * k, layer_inputs,
                                     [residuals[0]] * k)


# --- argument errors -------------------------------------------------------------------------------------------

def test_argument_errors_name_the_argument():
    x = torch.zeros(4, 128, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="x must be torch.bfloat16"):
        MHC.expand_to_mhc_fwd(x.float(), torch.empty(4, 4, 128, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="o must have shape"):
        MHC.expand_to_mhc_fwd(x, torch.empty(4, 4, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="mhc_scale must have shape"):
        MHC.mhc_head_compute_mix_fwd(torch.zeros(4, 4), torch.zeros(2), torch.zeros(4), torch.zeros(4, 4), 1e-2)
    with pytest.raises(ValueError, match="mhc_base_grad_partial must have shape"):
        MHC.mhc_head_compute_mix_bwd(torch.zeros(4, 4), torch.zeros(4, 4), torch.zeros(1), torch.zeros(4),
                                     torch.zeros(4, 4), torch.zeros(8, 1), torch.zeros(8, 3), 8)
    with pytest.raises(ValueError, match="input_mixes must have m \\* \\(m \\+ 2\\)"):
        MHC.mhc_pre_split_mixes_fwd(torch.zeros(4, 20), torch.zeros(3), torch.zeros(20), torch.zeros(4, 4),
                                    torch.zeros(4, 4), torch.zeros(4, 16), 1.0, 1e-6)
    with pytest.raises(TypeError, match="repeat must be an int"):
        MHC.mhc_sinkhorn_fwd(torch.zeros(2, 4, 4), torch.zeros(2, 4, 4), 1.5, 1e-6)
    with pytest.raises(ValueError, match="residual must have 4 dims"):
        MHC.mhc_post_fwd(x.view(4, 1, 128), torch.zeros(4, 4, 128, dtype=torch.bfloat16), torch.zeros(4, 4, 1),
                         torch.zeros(4, 4, 4))
    with pytest.raises(TypeError, match="x_grad must be torch.bfloat16"):
        MHC.mhc_pre_apply_mix_bwd(x, torch.zeros(4, 4, 128, dtype=torch.bfloat16), torch.zeros(4, 4),
                                  torch.zeros(4, 4, 128))
    with pytest.raises(ValueError, match="n_splits = 4 partials"):
        MHC.mhc_reduce_partials_and_rmsnorm_fwd(torch.zeros(2, 3, 1, 24), torch.zeros(2, 3, 1), torch.zeros(3, 1, 24),
                                                torch.zeros(3, 1), torch.zeros(3, 24), 512, 1e-6, 4)


def test_merge_errors_name_the_argument():
    with pytest.raises(ValueError, match="normw must have shape"):
        MHC.mhc_fn_normw_merge_fwd(torch.zeros(24, 64), torch.zeros(32), torch.zeros(24, 64))
    with pytest.raises(TypeError, match="normw_grad must be torch.float32"):
        MHC.mhc_fn_normw_merge_bwd(torch.zeros(24, 64), torch.zeros(64), torch.zeros(24, 64), torch.zeros(24, 64),
                                   torch.zeros(64, dtype=torch.bfloat16))


def test_every_entry_point_is_there():
    """2.1.0's 18 names; those not built say so (NotImplementedError naming them)."""
    names = ["expand_to_mhc_bwd", "expand_to_mhc_fwd", "mhc_head_compute_mix_bwd", "mhc_head_compute_mix_fwd",
             "mhc_multilayer_recompute", "mhc_fn_normw_merge_bwd", "mhc_fn_normw_merge_fwd",
             "mhc_reduce_partials_and_rmsnorm_bwd", "mhc_reduce_partials_and_rmsnorm_fwd", "mhc_post_bwd",
             "mhc_post_fwd", "mhc_pre_apply_mix_bwd", "mhc_pre_apply_mix_fwd", "mhc_pre_big_fuse_fwd",
             "mhc_pre_split_mixes_bwd", "mhc_pre_split_mixes_fwd", "mhc_sinkhorn_bwd", "mhc_sinkhorn_fwd"]
    assert sorted(MHC.__all__) == sorted(names)
    from tkgen.compat.tilekernels.mhc import mhc_post_fwd       # importable by TileKernels' path
    assert mhc_post_fwd is MHC.mhc_post_fwd


def test_the_bits_benchmark_runs_on_the_cpu(capsys):
    """benchmarks/compat_mhc_bits.py end to end on the CPU (tkgen only: tile_kernels needs CUDA), two cheap
    entry points: a markdown row per output."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "compat_mhc_bits.py"
    spec = importlib.util.spec_from_file_location("compat_mhc_bits", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--device", "cpu", "--tokens", "16", "--reps", "1", "--warmup", "0",
                       "--only", "mhc_sinkhorn_fwd,mhc_pre_split_mixes_fwd"]) == 0
    out = capsys.readouterr().out
    assert "| mhc_sinkhorn_fwd | out | tkgen only |" in out and "| comb_res_mix | tkgen only |" in out
    assert bench.compare(torch.ones(3), torch.ones(3)) == "equal bits"
    assert bench.compare(torch.ones(3), torch.tensor([1.0, 1.5, 1.0])).startswith("1 of 3 differ")
