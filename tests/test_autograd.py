"""tkgen.nn.functional and tkgen.nn: generated forward and backward kernels through torch.library ops with
registered autograd formulas. Gradients are checked against torch autograd through float64 formulas written
here by hand (not shared with tkgen), in eager mode and under torch.compile."""
from pathlib import Path

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


def test_compile_caches_are_keyed_to_the_ops_schemas_and_formulas(tmp_path, monkeypatch):
    """A warm torch.compile cache must not replay a graph traced against other op schemas or formulas (a
    backward graph calling an op without a param added since): importing an op tags the caches' keys with
    the digest of the op modules and hand-written formulas, after the user's own tag."""
    import torch.compiler.config as cconfig
    from torch._inductor.codecache import compiled_fx_graph_hash

    from tkgen import registry
    from tkgen.runtime import compile_caches

    monkeypatch.setattr(cconfig, "cache_key_tag", "users-own")
    compile_caches.tag_for("tkgen_generated.fused.swiglu_backward")
    ours = compile_caches.PREFIX + compile_caches.ops_digest(str(Path(registry.use_generated().__path__[0]).resolve()))
    assert cconfig.cache_key_tag == f"users-own|{ours}"
    compile_caches.tag_for("tkgen_generated.quant.per_token_cast")        # tagging again replaces ours only
    assert cconfig.cache_key_tag == f"users-own|{ours}"

    # the digest follows every op module's text, and the hand-written formulas
    for name in ("a", "b"):
        (tmp_path / "fam" / name).mkdir(parents=True)
        (tmp_path / "fam" / name / "op.py").write_text("SCHEMA = '(Tensor x) -> Tensor'\n")
    before = compile_caches.ops_digest(str(tmp_path))
    (tmp_path / "fam" / "b" / "op.py").write_text("SCHEMA = '(Tensor x, bool da_fma) -> Tensor'\n")
    compile_caches.ops_digest.cache_clear()
    assert compile_caches.ops_digest(str(tmp_path)) != before
    assert all((compile_caches._TKGEN / rel).is_file() for rel in compile_caches.FORMULAS)

    # and torch's cache key follows the tag (FX graphs; AOTAutograd's key extends the same details)
    gm = torch.fx.symbolic_trace(lambda x: x.sin())
    keys = set()
    for digest in ("0" * 16, "1" * 16):
        monkeypatch.setattr(cconfig, "cache_key_tag", "users-own|" + compile_caches.PREFIX + digest)
        keys.add(compiled_fx_graph_hash(gm, [torch.ones(3)], {}, [])[0])
    assert len(keys) == 2
