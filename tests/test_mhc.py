"""The mHC family on the CPU kernels: results against plain-torch formulas written here (bit for bit where the
specs fold in a fixed order, float64 otherwise), Sinkhorn's results doubly stochastic within what `repeat` and
`eps` imply, every generated backward against torch autograd of float64 formulas, the composites of
tkgen.nn.functional, and a two-layer toy model with mHC residuals trained for a few steps against the same
model in plain PyTorch."""
import copy

import pytest
import torch

import tkgen.nn.functional as F
import tkgen.ops as ops
from tkgen.nn import MHC, MHCHead

GEN = torch.Generator().manual_seed(14)


def rand(*shape, scale=1.0):
    return torch.randn(*shape, generator=GEN) * scale


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.view(torch.int16 if a.element_size() == 2 else torch.int32),
                       b.view(torch.int16 if b.element_size() == 2 else torch.int32))


# -- plain-torch formulas (any float dtype) ---------------------------------------------------------------
def split64(mixes, scale, base, m, post_mult, pre_eps):
    z = mixes * torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)]) + base
    return (torch.sigmoid(z[:, :m]) + pre_eps, torch.sigmoid(z[:, m:2 * m]) * post_mult,
            z[:, 2 * m:].reshape(-1, m, m))


def sinkhorn64(x, repeat, eps, last_sums=False):
    p = torch.softmax(x, -1) + eps
    for k in range(2 * repeat - 1):
        s = p.sum(-2 if k % 2 == 0 else -1, keepdim=True)
        p = p / (s + eps)
    return (p, s) if last_sums else p


def apply_mix64(x, mix):
    return (mix[..., None] * x).sum(-2)


def post64(x, residual, post, comb):
    return post[..., None] * x[:, None, :] + torch.einsum("tio,tid->tod", comb, residual)


def head_mix64(x, scale, base, eps):
    return torch.sigmoid(x * scale + base) + eps


def norm_fn64(residual, fn, eps):
    r = residual.flatten(-2)
    return (r @ fn.t()) * torch.rsqrt((r * r).mean(-1, keepdim=True) + eps)


# -- forward results ----------------------------------------------------------------------------------------
def test_stream_folds_are_bit_exact_in_stream_order():
    """mhc_pre_apply_mix and mhc_post add in stream order from 0 (post: from the post term), each product
    rounded to float32 first; expand_to_mhc copies and its backward adds the streams in order."""
    for m in (1, 2, 4):
        x = rand(5, m, 96).bfloat16()
        h = rand(5, 96).bfloat16()
        mix = torch.softmax(rand(5, m), -1)
        post, comb = torch.rand(5, m, generator=GEN) * 2, rand(5, m, m)
        acc = torch.zeros(5, 96)
        for s in range(m):
            acc = acc + mix[:, s, None] * x[:, s].float()
        same_bits(ops.mhc_pre_apply_mix(x, mix), acc.bfloat16())
        want = []
        for o in range(m):
            acc = post[:, o, None] * h.float()
            for i in range(m):
                acc = acc + comb[:, i, o, None] * x[:, i].float()
            want.append(acc.bfloat16())
        same_bits(ops.mhc_post(h, x, post, comb), torch.stack(want, 1))
        same_bits(ops.expand_to_mhc(h, m), h[:, None].expand(5, m, 96).contiguous())
        acc = torch.zeros(5, 96)
        for s in range(m):
            acc = acc + x[:, s].float()
        same_bits(ops.expand_to_mhc_backward(x), acc.bfloat16())


def test_mixes_match_float64():
    for m in (1, 4):
        mixes, scale, base = rand(6, m * (m + 2)), rand(3), rand(m * (m + 2), scale=0.1)
        got = ops.mhc_pre_split_mixes(mixes, scale, base, m, 2.0, 1e-2)
        want = split64(mixes.double(), scale.double(), base.double(), m, 2.0, 1e-2)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.double(), w, rtol=1e-6, atol=1e-7)
        x, sc, b = rand(6, m), rand(1), rand(m)
        torch.testing.assert_close(ops.mhc_head_compute_mix(x, sc, b, 1e-2).double(),
                                   head_mix64(x.double(), sc.double(), b.double(), 1e-2), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("m, repeat", [(2, 1), (4, 10), (4, 20)])
def test_sinkhorn_matches_float64_and_is_doubly_stochastic(m, repeat):
    x = rand(16, m, m, scale=2.0)
    eps = 1e-6
    p = ops.sinkhorn_normalize(x, repeat, eps)
    want, s = sinkhorn64(x.double(), repeat, eps, last_sums=True)
    torch.testing.assert_close(p.double(), want, rtol=1e-5, atol=1e-6)
    # the last division is by the column sums s: each column sums to s / (s + eps), 1 - eps / (s + eps),
    # up to the float32 rounding of m additions and m divisions
    cols = p.double().sum(-2)
    short = eps / (s.squeeze(-2) + eps)
    assert ((cols - (1 - short)).abs() <= 4 * m * 2.0 ** -24).all()
    # the rows converge as Sinkhorn's iteration does (geometrically, at a rate the matrix sets): as far
    # from 1 as the float64 iteration after `repeat` rounds, up to float32 rounding
    rows = (p.double().sum(-1) - 1).abs().amax(-1)
    rows64 = (want.sum(-1) - 1).abs().amax(-1)
    assert (rows <= rows64 + 4 * m * 2.0 ** -24 + 1e-6).all()
    assert (p >= 0).all()


def test_sinkhorn_rows_approach_one_as_repeat_grows():
    x = rand(32, 4, 4, scale=3.0)
    dev = [(ops.sinkhorn_normalize(x, r, 1e-6).sum(-1) - 1).abs().max().item() for r in (1, 3, 10)]
    assert dev[0] > dev[1] > dev[2]


# -- gradients ------------------------------------------------------------------------------------------------
def _leaf(t, dtype=None):
    return t.detach().to(dtype or t.dtype).requires_grad_()


def _grads(fn, inputs, gs):
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    sum((o.double() * g).sum() for o, g in zip(outs, gs)).backward()
    return [t.grad for t in inputs]


def _check(fn, fn64, inputs, gs, rtol, atol):
    got = _grads(fn, [_leaf(t) for t in inputs], gs)
    # autograd hands a bf16 output its gradient in bf16: the float64 reference starts from the same values
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    want = _grads(fn64, [_leaf(t, torch.float64) for t in inputs], [g.to(o.dtype).double() for g, o in zip(gs, outs)])
    for name, (g, w) in enumerate(zip(got, want)):
        assert g is not None, name
        torch.testing.assert_close(g.double(), w, rtol=rtol, atol=atol, msg=lambda s: f"input {name}: {s}")


def test_generated_backwards_match_float64_autograd():
    GEN.manual_seed(11)          # the same draws whichever tests ran before
    m, d = 4, 64
    x = rand(5, m, d).bfloat16()
    h = rand(5, d).bfloat16()
    mix, post, comb = torch.softmax(rand(5, m), -1), torch.rand(5, m, generator=GEN), rand(5, m, m)
    # bf16 gradients: one rounding of the result (2^-8 relative) on top of the float32 arithmetic
    _check(ops.expand_to_mhc, lambda t: t[:, None].expand(5, m, d), [h], [rand(5, m, d)], 1e-2, 1e-2)
    _check(ops.mhc_pre_apply_mix, apply_mix64, [x, mix], [rand(5, d)], 1e-2, 2e-2)
    _check(ops.mhc_post, post64, [h, x, post, comb], [rand(5, m, d)], 1e-2, 2e-2)
    mixes, scale, base = rand(5, m * (m + 2)), rand(3), rand(m * (m + 2), scale=0.1)
    _check(lambda a, s, b: ops.mhc_pre_split_mixes(a, s, b, m, 2.0, 1e-2),
           lambda a, s, b: split64(a, s, b, m, 2.0, 1e-2), [mixes, scale, base],
           [rand(5, m), rand(5, m), rand(5, m, m)], 1e-5, 1e-5)
    _check(lambda a, s, b: ops.mhc_head_compute_mix(a, s, b, 1e-2), lambda a, s, b: head_mix64(a, s, b, 1e-2),
           [rand(5, m), rand(1), rand(m)], [rand(5, m)], 1e-5, 1e-5)


@pytest.mark.parametrize("m, repeat", [(2, 1), (4, 10)])
def test_sinkhorn_backward_matches_float64_autograd(m, repeat):
    _check(lambda t: ops.sinkhorn_normalize(t, repeat, 1e-6), lambda t: sinkhorn64(t, repeat, 1e-6),
           [rand(6, m, m)], [rand(6, m, m)], 1e-4, 1e-5)


def test_composites_match_float64_autograd():
    m, d = 4, 32
    residual = rand(2, 3, m, d).bfloat16()
    fn, base = rand(m * (m + 2), m * d, scale=0.05), rand(m * (m + 2), scale=0.1)
    scale = torch.ones(3) + rand(3, scale=0.1)

    def pre(r, f, s, b):
        y, (p, c) = F.mhc_pre(r, f, s, b, mhc_mult=m, post_mult_value=2.0)
        return y, p, c

    def pre64(r, f, s, b):
        pre_, p, c = split64(norm_fn64(r.reshape(-1, m, d), f, 1e-6), s, b, m, 2.0, 1e-6)
        y = apply_mix64(r.reshape(-1, m, d), pre_).reshape(2, 3, d)
        return y, p.reshape(2, 3, m, 1), sinkhorn64(c, 10, 1e-6).reshape(2, 3, m, m)

    gs = [rand(2, 3, d), rand(2, 3, m, 1), rand(2, 3, m, m)]
    _check(pre, pre64, [residual, fn, scale, base], gs, 2e-2, 2e-2)
    hfn, hscale, hbase = rand(m, m * d, scale=0.05), rand(1), rand(m)
    _check(lambda r, f, s, b: F.mhc_head(r, f, s, b, mhc_mult=m),
           lambda r, f, s, b: apply_mix64(r.reshape(-1, m, d), head_mix64(norm_fn64(r.reshape(-1, m, d), f, 1e-6),
                                                                          s, b, 1e-6)).reshape(2, 3, d),
           [residual, hfn, hscale, hbase], [rand(2, 3, d)], 2e-2, 2e-2)
    h = rand(2, 3, d).bfloat16()
    same_bits(F.expand_from_embedding(h, m), h[..., None, :].expand(2, 3, m, d).contiguous())


# -- training ---------------------------------------------------------------------------------------------------
class TorchMHC(torch.nn.Module):
    """The MHC block in plain PyTorch, float32, with the bf16 roundings of the kernels' outputs."""

    def __init__(self, block: MHC):
        super().__init__()
        self.sublayer = copy.deepcopy(block.sublayer)
        self.fn, self.scale, self.base = (torch.nn.Parameter(p.detach().clone()) for p in (block.fn, block.scale,
                                                                                            block.base))
        self.o = block.options

    def forward(self, residual):
        m = self.o["mhc_mult"]
        lead, d = residual.shape[:-2], residual.shape[-1]
        r = residual.reshape(-1, m, d)
        pre, post, comb = split64(norm_fn64(r.float(), self.fn, self.o["norm_eps"]), self.scale, self.base, m,
                                  self.o["post_mult_value"], self.o["pre_eps"])
        comb = sinkhorn64(comb, self.o["sinkhorn_repeat"], self.o["sinkhorn_eps"])
        y = self.sublayer(apply_mix64(r.float(), pre).bfloat16().reshape(*lead, d))
        return post64(y.reshape(-1, d).float(), r.float(), post, comb).bfloat16().reshape(residual.shape)


class TorchHead(torch.nn.Module):
    def __init__(self, head: MHCHead):
        super().__init__()
        self.fn, self.scale, self.base = (torch.nn.Parameter(p.detach().clone()) for p in (head.fn, head.scale,
                                                                                            head.base))
        self.o = head.options

    def forward(self, residual):
        m, d = residual.shape[-2:]
        r = residual.reshape(-1, m, d).float()
        mix = head_mix64(norm_fn64(r, self.fn, self.o["norm_eps"])[:, :m], self.scale, self.base, self.o["pre_eps"])
        return apply_mix64(r, mix).bfloat16().reshape(*residual.shape[:-2], d)


class Sublayer(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d, dtype=torch.bfloat16)

    def forward(self, x):
        return torch.tanh(self.lin(x))


def test_a_two_layer_mhc_model_trains_like_plain_pytorch():
    torch.manual_seed(0)
    m, d = 4, 32
    blocks = [MHC(Sublayer(d), d, m, init_std=0.05) for _ in range(2)]
    head = MHCHead(d, m, init_std=0.05)
    ours = torch.nn.ModuleList(blocks + [head])
    ref_blocks = [TorchMHC(b) for b in blocks]
    ref = torch.nn.ModuleList(ref_blocks + [TorchHead(head)])
    x, target = rand(2, 5, d).bfloat16(), rand(2, 5, d)

    def loss_of(layers, expand):
        r = expand(x)
        for layer in layers[:-1]:
            r = layer(r)
        return ((layers[-1](r).float() - target) ** 2).mean()

    opt, ref_opt = torch.optim.SGD(ours.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    losses, ref_losses = [], []
    for _ in range(4):
        for model, o, out, expand in ((ours, opt, losses, lambda t: F.expand_from_embedding(t, m)),
                                      (ref, ref_opt, ref_losses, lambda t: t[..., None, :].expand(2, 5, m, d))):
            o.zero_grad()
            loss = loss_of(model, expand)
            loss.backward()
            o.step()
            out.append(loss.item())
    assert losses[-1] < losses[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=5e-3, atol=1e-4)


# -- TileKernels' first-release API --------------------------------------------------------------------------
def test_compat_v1_takes_tilekernels_shapes():
    import tkgen.compat.tilekernels_v1 as tk
    from tkgen.compat.tilekernels_v1.modeling.mhc.ops import mhc_post, mhc_pre_apply_mix

    m, d = 4, 64
    r, h = rand(2, 3, m, d).bfloat16(), rand(2, 3, d).bfloat16()
    tok = lambda t, n: t.reshape(-1, *t.shape[t.dim() - n:])  # noqa: E731
    out = torch.empty(2, 3, m, d, dtype=torch.bfloat16)
    assert tk.modeling.mhc.ops.expand_to_mhc(h, m, out=out) is out
    same_bits(out, h[..., None, :].expand(2, 3, m, d).contiguous())
    pre, post, comb = tk.modeling.mhc.ops.mhc_pre_split_mixes(rand(2, 3, m * (m + 2)), rand(3), rand(m * (m + 2)),
                                                              m, 2.0, 1e-2)
    assert pre.shape == post.shape == (2, 3, m, 1) and comb.shape == (2, 3, m, m)
    normalized = tk.modeling.mhc.ops.sinkhorn_normalize(comb)
    same_bits(normalized, ops.sinkhorn_normalize(tok(comb, 2), 10, 1e-6).reshape(comb.shape))
    comb = normalized
    same_bits(mhc_pre_apply_mix(r, pre), ops.mhc_pre_apply_mix(tok(r, 2), pre.reshape(-1, m)).reshape(2, 3, d))
    same_bits(mhc_post(h, r, post, comb), ops.mhc_post(tok(h, 1), tok(r, 2), post.reshape(-1, m),
                                                       comb.reshape(-1, m, m)).reshape(r.shape))
    mix = tk.modeling.mhc.ops.mhc_head_compute_mix(rand(2, 3, m), rand(1), rand(m), 1e-2)
    assert mix.shape == (2, 3, m)
    with torch.no_grad():
        y, (p, c) = tk.modeling.mhc.mhc_pre(r, rand(m * (m + 2), m * d, scale=0.01), rand(3), rand(m * (m + 2)),
                                            norm_weight=rand(m * d))
    assert y.shape == (2, 3, d) and p.shape == (2, 3, m, 1) and c.shape == (2, 3, m, m)
    fn = rand(m * (m + 2), m * d, scale=0.01)
    same_bits(tk.modeling.mhc.ops.mhc_pre_norm_fn(r, fn, None, 1e-6),
              ops.mhc_pre_norm_fn(r.reshape(6, m * d), fn, None, eps=1e-6)[0].reshape(2, 3, m * (m + 2)))


# -- the type rules of alternate_normalize ---------------------------------------------------------------------
@pytest.mark.parametrize("line, message", [
    ("out = alternate_normalize(p0, i, i, k, eps)", "the two axes must differ"),
    ("out = alternate_normalize(p0, i, j, j, eps)", "counts the steps; no value may vary over it"),
    ("out = alternate_normalize(p0, t, j, k, eps)", "runs along the rows"),
    ("out = alternate_normalize(p0, i, j, k, p0)", "eps is a float constant or param"),
])
def test_alternate_normalize_rejects_what_it_cannot_run(tmp_path, line, message):
    from tkgen import registry
    from tkgen.driver import validate_files
    good = (registry.specs_dir() / "mhc" / "sinkhorn_normalize.yaml").read_text()
    bad = good.replace("out = alternate_normalize(p0, i, j, k, eps)", line)
    assert bad != good
    p = tmp_path / "op.yaml"
    p.write_text(bad.replace("op: sinkhorn_normalize", "op: sinkhorn_variant").replace("backward:", "unused:")
                 .split("unused:")[0])
    errors = validate_files([p], registry.specs_dir())
    assert len(errors) == 1 and message in errors[0].message, errors
    assert errors[0].field_path[0] == "compute"
