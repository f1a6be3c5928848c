"""The first release's residual-gradient accumulation of mHC (operators-v1.md 7, `fuse_grad_acc`) through
tkgen.compat.tilekernels_v1, in TileKernels' calling pattern: a buffer hung on the residual's storage as
`grad_from_mhc_post` (by the caller, or by mhc_post's backward), backward, then the gradient read from the
buffer; against float64 autograd of formulas written here. tkgen.nn.functional keeps autograd's sum."""
import pytest
import torch

import tkgen.compat.tilekernels_v1 as tk1
import tkgen.nn.functional as F

OPS = tk1.modeling.mhc.ops
GEN = torch.Generator().manual_seed(31)
M, D = 4, 64


def rand(*shape, scale=1.0):
    return torch.randn(*shape, generator=GEN) * scale


def tf32(x):
    """fn * norm_weight rounded as the kernels round it (bits + 0x1000, low 13 bits cleared)."""
    return ((x.float().view(torch.int32) + 0x1000) & -8192).view(torch.float32)


def norm_fn64(residual, fn, w, eps):
    r = residual.flatten(-2)
    f = fn if w is None else fn * w
    return (r @ f.t()) * torch.rsqrt((r * r).mean(-1, keepdim=True) + eps)


def split64(mixes, scale, base, m, post_mult, pre_eps):
    z = mixes * torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)]) + base
    return (torch.sigmoid(z[..., :m]) + pre_eps, torch.sigmoid(z[..., m:2 * m]) * post_mult,
            z[..., 2 * m:].reshape(*z.shape[:-1], m, m))


def sinkhorn64(x, repeat, eps):
    p = torch.softmax(x, -1) + eps
    for k in range(2 * repeat - 1):
        p = p / (p.sum(-2 if k % 2 == 0 else -1, keepdim=True) + eps)
    return p


def post64(x, residual, post, comb):
    return post * x[..., None, :] + torch.einsum("...io,...id->...od", comb, residual)


def inputs(with_weight):
    residual = (rand(2, 3, M, D) * (1 + 0.01 * torch.arange(M))[:, None]).bfloat16()
    fn = rand(M * (M + 2), M * D, scale=1e-2)
    w = rand(M * D, scale=0.1) + 1 if with_weight else None
    return residual, fn, w


def close_bf16(got, want):
    """bf16's relative tolerance (assert_close's default for bf16) and an absolute one of 2e-3 of the largest
    element: the gradient cancels (dA @ F + 2 r ds) and dA is rounded to TF32, so elements near zero carry
    an error of the largest terms (test_mhc_pre_norm_fn.py's bound)."""
    torch.testing.assert_close(got.double(), want.double(), rtol=1.6e-2, atol=2e-3 * float(want.abs().max()))


@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize("seeded, dtype", [(False, torch.bfloat16), (True, torch.bfloat16), (True, torch.float32)])
def test_pre_norm_fn_adds_into_the_hung_buffer(with_weight, seeded, dtype):
    """test_norm_fn.py's pattern: forward, hang zeros_like(residual) (or a buffer already holding a gradient,
    or a float32 one), backward; the buffer holds what it held plus the residual's gradient, the attribute
    is gone, autograd gave the residual nothing; fn's gradient is returned as before."""
    residual, fn, w = inputs(with_weight)
    res = residual.clone().requires_grad_(True)
    fn_ = fn.clone().requires_grad_(True)
    out = OPS.mhc_pre_norm_fn(res, fn_, w, 1e-6)
    start = rand(*res.shape, scale=0.5).to(dtype) if seeded else torch.zeros_like(res, dtype=dtype)
    buf = res.untyped_storage().grad_from_mhc_post = start.clone()
    g = rand(*out.shape)
    torch.autograd.backward([out], [g])

    r64, f64 = residual.double().requires_grad_(True), tf32(fn if w is None else fn * w).double()
    want = torch.autograd.grad(norm_fn64(r64, f64, None, 1e-6), r64, g.double())[0]
    assert res.grad is None and not hasattr(res.untyped_storage(), "grad_from_mhc_post")
    assert buf.dtype == dtype
    close_bf16(buf, start.double() + want)
    assert fn_.grad is not None and fn_.grad.shape == fn.shape


def test_without_fuse_grad_acc_or_a_buffer_the_gradient_is_returned():
    """fuse_grad_acc=False: today's behaviour, a buffer on the storage left untouched; fuse_grad_acc with no
    buffer (TileKernels fails on the missing attribute): the gradient is returned too, the same bits."""
    residual, fn, _ = inputs(False)
    g = rand(2, 3, M * (M + 2))
    grads = []
    for fuse, hang in ((False, True), (True, False), (False, False)):
        res = residual.clone().requires_grad_(True)
        out = OPS.mhc_pre_norm_fn(res, fn, None, 1e-6, fuse_grad_acc=fuse)
        if hang:
            buf = res.untyped_storage().grad_from_mhc_post = torch.zeros_like(res)
        torch.autograd.backward([out], [g])
        if hang:
            assert torch.equal(buf, torch.zeros_like(res)) and res.untyped_storage().grad_from_mhc_post is buf
        grads.append(res.grad)
    assert grads[0] is not None and torch.equal(grads[0], grads[1]) and torch.equal(grads[0], grads[2])
    res = residual.clone().requires_grad_(True)
    torch.autograd.backward([F.mhc_norm_fn(res, fn, None, 1e-6)], [g])
    assert torch.equal(res.grad, grads[0])


def test_pre_apply_mix_adds_into_the_buffer_with_one_rounding():
    """test_pre_apply_mix.py's pattern (the buffer pre-set): bf16(mix * g + buffer), rounded once, the
    buffer kept on the storage (mhc_pre_norm_fn deletes it, later); without one the gradient is returned."""
    x = torch.sigmoid(rand(2, 3, M, D)).bfloat16()
    mix = torch.softmax(rand(2, 3, M, 1), -2)
    g = rand(2, 3, D).bfloat16()
    start = rand(2, 3, M, D).bfloat16()
    xs = x.clone().requires_grad_(True)
    mx = mix.clone().requires_grad_(True)
    out = OPS.mhc_pre_apply_mix(xs, mx)
    buf = xs.untyped_storage().grad_from_mhc_post = start.clone()
    torch.autograd.backward([out], [g])
    assert xs.grad is None and xs.untyped_storage().grad_from_mhc_post is buf
    want = (mix.double() * g.double()[..., None, :]).float() + start.float()     # one float32 sum of the product
    assert torch.equal(buf.view(torch.int16), want.bfloat16().view(torch.int16))
    torch.testing.assert_close(mx.grad.double(), (g.double()[..., None, :] * x.double()).sum(-1, keepdim=True),
                               rtol=1e-5, atol=1e-5)
    xs2 = x.clone().requires_grad_(True)
    torch.autograd.backward([OPS.mhc_pre_apply_mix(xs2, mix)], [g])
    assert torch.equal(xs2.grad.view(torch.int16), (mix.double() * g.double()[..., None, :]).float().bfloat16().view(torch.int16))


def test_post_publishes_its_residual_gradient_and_returns_it():
    """mhc_post's backward hangs its bf16 residual gradient on the residual's storage and returns that
    tensor; with nothing else consuming the residual it stays there."""
    x, residual = rand(2, 3, D).bfloat16(), rand(2, 3, M, D).bfloat16()
    post, comb = torch.sigmoid(rand(2, 3, M, 1)), torch.softmax(rand(2, 3, M, M), -1)
    res = residual.clone().requires_grad_(True)
    g = rand(2, 3, M, D).bfloat16()
    torch.autograd.backward([OPS.mhc_post(x, res, post, comb)], [g])
    buf = res.untyped_storage().grad_from_mhc_post
    assert buf.dtype == torch.bfloat16 and buf.shape == res.shape and torch.equal(res.grad, buf)
    want = torch.einsum("...io,...od->...id", comb.double(), g.double())
    close_bf16(buf, want)


@pytest.mark.parametrize("with_weight", [False, True])
def test_an_mhc_block_accumulates_the_residual_gradient_into_post_buffer(with_weight):
    """A block as the first release wires it: layer_input, (post, comb) = mhc_pre(R); R' = mhc_post(f(layer_input),
    R, post, comb). mhc_post's backward creates the buffer; mhc_pre_apply_mix and mhc_pre_norm_fn add into it
    and return None; autograd gives R the buffer: the whole gradient, against float64 autograd; the attribute
    is gone after (mhc_pre_norm_fn deleted it)."""
    residual, fn, w = inputs(with_weight)
    scale, base = torch.ones(3) + rand(3, scale=0.1), rand(M * (M + 2), scale=0.1)
    lin = rand(D, D, scale=D ** -0.5)
    G = rand(2, 3, M, D)

    res = residual.clone().requires_grad_(True)
    layer_input, (post, comb) = tk1.modeling.mhc.mhc_pre(res, fn, scale, base, norm_weight=w, post_mult_value=2.0)
    y = torch.tanh(layer_input.float() @ lin).bfloat16()
    out = OPS.mhc_post(y, res, post, comb)
    seen = {}
    orig = OPS._ResidualGrad.backward

    def spy(ctx, grad):
        r = orig(ctx, grad)
        if ctx.role == "post":
            seen["buffer"] = r[0]
        return r
    OPS._ResidualGrad.backward = staticmethod(spy)
    try:
        torch.autograd.backward([out], [G.bfloat16()])
    finally:
        OPS._ResidualGrad.backward = staticmethod(orig)
    assert not hasattr(res.untyped_storage(), "grad_from_mhc_post")
    assert res.grad is not None and res.grad.dtype == torch.bfloat16
    assert torch.equal(res.grad, seen["buffer"])    # the buffer the consumers added into is what R received

    r64 = residual.double().requires_grad_(True)
    f64 = tf32(fn if w is None else fn * w).double()
    pre, p, c = split64(norm_fn64(r64, f64, None, 1e-6), scale.double(), base.double(), M, 2.0, 1e-6)
    c = sinkhorn64(c, 10, 1e-6)
    li = (pre[..., None] * r64).sum(-2).bfloat16().double()     # the sublayer sees bf16 inputs, as ours
    y64 = torch.tanh(li @ lin.double())
    torch.autograd.backward([post64(y64, r64, p[..., None], c)], [G.bfloat16().double()])
    torch.testing.assert_close(res.grad.double(), r64.grad, rtol=2e-2, atol=2e-2 * float(r64.grad.abs().max()))
    # the same block through tkgen.nn.functional: autograd's sum, no attribute, the same gradient within bf16
    res2 = residual.clone().requires_grad_(True)
    li2, (p2, c2) = F.mhc_pre(res2, fn, scale, base, norm_weight=w, post_mult_value=2.0)
    out2 = F.mhc_residual(torch.tanh(li2.float() @ lin).bfloat16(), res2, p2, c2)
    torch.autograd.backward([out2], [G.bfloat16()])
    assert not hasattr(res2.untyped_storage(), "grad_from_mhc_post")
    torch.testing.assert_close(res2.grad.double(), r64.grad, rtol=2e-2, atol=2e-2 * float(r64.grad.abs().max()))


def test_head_reads_a_hung_buffer():
    """mhc_head's residual is consumed by no mhc_post: TileKernels' callers hang the buffer themselves; the
    head's two consumers add into it."""
    residual, _, _ = inputs(False)
    fn, scale, base = rand(M, M * D, scale=1e-2), rand(1), rand(M)
    res = residual.clone().requires_grad_(True)
    out = tk1.modeling.mhc.mhc_head(res, fn, scale, base)
    buf = res.untyped_storage().grad_from_mhc_post = torch.zeros_like(res)
    g = rand(2, 3, D).bfloat16()
    torch.autograd.backward([out], [g])
    assert res.grad is None and not hasattr(res.untyped_storage(), "grad_from_mhc_post")
    r64 = residual.double().requires_grad_(True)
    mixes = norm_fn64(r64, tf32(fn).double(), None, 1e-6)
    mix = torch.sigmoid(mixes * scale.double() + base.double()) + 1e-6
    torch.autograd.backward([(mix[..., None] * r64).sum(-2)], [g.double()])
    torch.testing.assert_close(buf.double(), r64.grad, rtol=2e-2, atol=2e-2 * float(r64.grad.abs().max()))
