"""tkgen.nn.functional and tkgen.nn: generated forward and backward kernels through torch.library ops with
registered autograd formulas. Gradients are checked against torch autograd through float64 formulas written
here by hand (not shared with tkgen), in eager mode and under torch.compile."""
import torch

import tkgen.nn.functional as F
from tkgen.nn import RMSNorm, SwiGLU


def swiglu64(x, w):
    a, b = x.chunk(2, dim=-1)
    y = torch.nn.functional.silu(a) * b
    return y if w is None else y * w[:, None]


def rms_norm64(x, weight, residual, eps):
    s = x if residual is None else x + residual
    return torch.nn.functional.rms_norm(s, (s.shape[-1],), weight, eps)


def _grads(fn, inputs, g):
    """Gradients of sum(fn(*inputs) * g) with respect to every input that requires them."""
    out = fn(*inputs)
    (out.float() * g).sum().backward()
    return [None if t is None else t.grad for t in inputs]


def _leaf(t, dtype=None):
    return None if t is None else t.detach().to(dtype or t.dtype).requires_grad_()


def _close(got, want, rtol, atol):
    for g, w in zip(got, want):
        if w is None:
            assert g is None
            continue
        torch.testing.assert_close(g.double(), w, rtol=rtol, atol=atol)


def test_swiglu_gradients_match_float64_autograd():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(7, 128, generator=gen) * 2
    w = torch.rand(7, generator=gen)
    g = torch.randn(7, 64, generator=gen)
    for weights in (w, None):
        got = _grads(lambda x, w: F.swiglu(x, weights=w, fmt="fp32"), [_leaf(x), _leaf(weights)], g)
        want = _grads(swiglu64, [_leaf(x, torch.float64), _leaf(weights, torch.float64)], g.double())
        _close(got, want, rtol=1e-5, atol=1e-5)


def test_rms_norm_gradients_match_float64_autograd():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 64, generator=gen)
    r = torch.randn(5, 64, generator=gen)
    wt = torch.rand(64, generator=gen) + 0.5
    g = torch.randn(5, 64, generator=gen)
    for residual in (r, None):
        got = _grads(lambda x, w, r: F.rms_norm(x, (x.shape[-1],), w, 1e-6, residual=r), [_leaf(x), _leaf(wt), _leaf(residual)], g)
        want = _grads(lambda x, w, r: rms_norm64(x, w, r, 1e-6),
                      [_leaf(x, torch.float64), _leaf(wt, torch.float64), _leaf(residual, torch.float64)], g.double())
        _close(got, want, rtol=1e-4, atol=1e-5)


def test_modules_train_under_torch_compile():
    torch.manual_seed(2)
    norm, act = RMSNorm(64, dtype=torch.float32), SwiGLU()

    def step(x):
        return act(norm(x).repeat(1, 2)).square().mean()

    x = torch.randn(6, 64)
    eager = step(x)
    eager.backward()
    want = norm.weight.grad.clone()
    norm.weight.grad = None
    compiled = torch.compile(step, fullgraph=True)(x)
    compiled.backward()
    assert torch.equal(compiled.detach(), eager.detach())
    assert torch.equal(norm.weight.grad, want)
