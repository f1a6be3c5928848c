"""The MoE options of the fused SwiGLU ops, against float64 formulas written here (not shared with tkgen):
routing weights read at positions (a negative position marks a padding row), padding rows left untouched
and not counted, the routed scaling factor, the clamp and its three counters (added into the buffer)."""
import pytest
import torch

import tkgen.nn.functional as F
from tkgen import ops, registry
from tkgen.runtime.fastpath import allocate, run

SENTINEL = 12345.0          # what the caller's buffers hold before a call; padding rows must keep it


def routed(T=13, H=64, T_tok=5, K=3, seed=0):
    """bf16 rows, routing weights [T_tok, K], per-row positions (two rows without a token) and experts (three
    padding rows, one of them also without a token)."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, 2 * H, generator=gen) * 2).to(torch.bfloat16)
    topk = torch.rand(T_tok, K, generator=gen) + 0.25
    pos = torch.randint(0, T_tok * K, (T,), generator=gen, dtype=torch.int32)
    pos[[2, 7]] = -1
    expert = torch.randint(0, 4, (T,), generator=gen, dtype=torch.int32)
    expert[[4, 7, T - 2]] = -1
    return x, topk, pos, expert


def swiglu64(x, w, clamp):
    """The activation in float64 and, with a clamp, the counts of a > c, b > c and b < -c."""
    a, b = x.double().chunk(2, dim=-1)
    counts = None
    if clamp is not None:
        counts = [int((a > clamp).sum()), int((b > clamp).sum()), int((b < -clamp).sum())]
        a, b = a.clamp(max=clamp), b.clamp(-clamp, clamp)
    return torch.nn.functional.silu(a) * b * w[:, None], counts


@pytest.mark.parametrize("clamp", [None, 0.5])
def test_forward_gathers_weights_skips_padding_and_counts_the_clamp(clamp):
    x, topk, pos, expert = routed()
    keep = (expert >= 0) & (pos >= 0)
    w = torch.where(pos >= 0, topk.double().reshape(-1)[pos.clamp(min=0).long()], 0.0) * 2.5
    want, counts = swiglu64(x[keep], w[keep], clamp)
    pkg = registry.op_package("swiglu_forward")
    tensors = {"x": x, "pos_to_token_topk": pos, "topk_weights": topk, "pos_to_expert": expert}
    params = {"fmt": "fp32", "routed_scaling_factor": 2.5, "clamp": clamp}
    out = allocate(pkg.OP, tensors, params)
    out[0].fill_(SENTINEL)
    out[1].fill_(1000)                          # the caller's accumulator: counts are added into it
    got, got_counts = run(pkg.OP, tensors, params, out=out)
    torch.testing.assert_close(got[keep].double(), want, rtol=2e-6, atol=1e-30)
    assert bool((got[~keep] == SENTINEL).all())
    if clamp is None:
        assert got_counts.numel() == 0
    else:
        assert got_counts.tolist() == [1000 + c for c in counts]
        # the op itself returns fresh counts
        assert ops.swiglu_forward(x, fmt="fp32", clamp=clamp, **{k: v for k, v in tensors.items() if k != "x"})[1].tolist() == counts


def test_forward_cast_equals_the_cast_of_the_forward_on_rows_written():
    x, topk, pos, expert = routed(H=256, seed=1)
    keep = (expert >= 0) & (pos >= 0)
    opts = dict(pos_to_token_topk=pos, topk_weights=topk, pos_to_expert=expert, routed_scaling_factor=2.5,
                clamp=10.0)
    y, counts = ops.swiglu_forward(x, fmt="fp32", **opts)
    pkg = registry.op_package("swiglu_forward_and_per_token_cast")
    tensors = {"x": x, "pos_to_token_topk": pos, "topk_weights": topk, "pos_to_expert": expert}
    params = {"group": 128, "scale": "ue8m0", "routed_scaling_factor": 2.5, "clamp": 10.0}
    out = allocate(pkg.OP, tensors, params)
    for o in out[:2]:
        o.view(torch.uint8).fill_(0xA5)
    q, sf, got_counts = run(pkg.OP, tensors, params, out=out)
    want_q, want_sf = ops.per_token_cast(y[keep], fmt="e4m3", group=128, scale="ue8m0")
    assert torch.equal(q[keep].view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(sf.view(torch.uint8)[keep], want_sf.view(torch.uint8))
    assert bool((q[~keep].view(torch.uint8) == 0xA5).all()) and bool((sf.view(torch.uint8)[~keep] == 0xA5).all())
    assert torch.equal(got_counts, counts)


def test_a_position_past_the_weights_reads_zero():
    x, topk, pos, _ = routed(seed=2)
    pos[[0, 5]] = topk.numel()              # invalid: never read out of bounds, the weight is 0
    out, = ops.swiglu_forward(x, pos_to_token_topk=pos, topk_weights=topk, fmt="fp32")[:1]
    assert bool((out[[0, 5]] == 0).all())
    w = torch.where(pos >= 0, topk.double().reshape(-1)[pos.clamp(0, topk.numel() - 1).long()], 0.0)
    w[[0, 5]] = 0
    keep = pos >= 0
    torch.testing.assert_close(out[keep].double(), swiglu64(x[keep], w[keep], None)[0], rtol=2e-6, atol=1e-30)


def _grads(fn, inputs, g):
    out = fn(*inputs)
    (out.double() * g).sum().backward()
    return [None if t is None else t.grad for t in inputs]


def _leaf(t, dtype=None):
    return t.detach().to(dtype or t.dtype).requires_grad_()


@pytest.mark.parametrize("clamp", [None, 0.5])
def test_gradients_with_every_option_match_float64_autograd(clamp):
    x, topk, pos, expert = routed(T=9, seed=3)
    x = x.float()
    weights = torch.rand(9, generator=torch.Generator().manual_seed(4)) + 0.5
    g = torch.randn(9, 64, generator=torch.Generator().manual_seed(5)).double()
    keep = ((expert >= 0) & (pos >= 0)).double()[:, None]

    def swiglu(x, wr, tw):
        return F.swiglu(x, weights=wr, pos_to_token_topk=pos, topk_weights=tw, pos_to_expert=expert, fmt="fp32",
                        routed_scaling_factor=2.5, clamp=clamp)

    def oracle(x, wr, tw):
        a, b = x.chunk(2, dim=-1)
        if clamp is not None:
            a, b = a.clamp(max=clamp), b.clamp(-clamp, clamp)
        w = wr * torch.where(pos >= 0, tw.reshape(-1)[pos.clamp(min=0).long()], 0.0) * 2.5
        return torch.nn.functional.silu(a) * b * w[:, None] * keep      # padding rows: not a function of anything

    got = _grads(swiglu, [_leaf(x), _leaf(weights), _leaf(topk)], g)
    want = _grads(oracle, [_leaf(x, torch.float64), _leaf(weights, torch.float64), _leaf(topk, torch.float64)], g)
    for gv, wv in zip(got, want):
        torch.testing.assert_close(gv.double(), wv, rtol=1e-5, atol=1e-6)
    assert bool((got[0][keep[:, 0] == 0] == 0).all())            # zero gradients in padding rows


def test_options_under_torch_compile():
    """Fake shapes of every new output (counts, gradients added at positions) under torch.compile."""
    from tkgen.nn import SwiGLU
    x, topk, pos, expert = routed(T=9, seed=6)
    act = SwiGLU(routed_scaling_factor=2.5, clamp=0.5)

    def step(x, topk):
        return act(x, pos_to_token_topk=pos, topk_weights=topk, pos_to_expert=expert).float().square().sum()

    grads = []
    for fn in (step, torch.compile(step, fullgraph=True, backend="aot_eager")):    # fake shapes, no codegen
        xs, ts = _leaf(x.float()), _leaf(topk)
        fn(xs, ts).backward()
        grads.append((xs.grad, ts.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
