"""The differentiable MoE path of tkgen.nn (gate -> mapping -> expand -> experts -> reduce, every step's
backward a generated kernel) against plain PyTorch written here, not shared with tkgen: an MoE layer trained
for a few steps next to an argsort / index_select / index_add layer with the same initial weights (eager and
under torch.compile(fullgraph=True)), and the gradients of each step against float64 autograd of torch
formulas.

Everything runs in float32, which every op takes. The two layers differ only in the order and form of
float32 arithmetic (the gate's pairwise tree against torch's sum, the in-order fused multiply-adds of
reduce against index_add, the gate backward's polynomial for sqrt(softplus)' against torch's autograd,
the blocked bmm against per-expert matmuls), each a few ulp (2^-24 relative) of sums of 2 to 64 terms;
measured, the gradients differ by at most 7e-7 of each tensor's largest element over the steps, the
losses by 1e-7. The bounds, 1e-5 for gradients and 1e-6 for losses, leave a margin of ten without hiding
a wrong term: a gradient off by 0.1% somewhere (a weight, a slot, a row) fails them by a factor of ten or
more.
"""
import pytest
import torch

import tkgen.nn as tnn
import tkgen.nn.functional as F

TOKENS, HIDDEN, INTERMEDIATE, EXPERTS, TOPK, ALIGNMENT = 64, 64, 32, 8, 2, 4
SCALE = 1.5           # routed scaling factor
STEPS, LR = 4, 0.5


def close(got, want, what, rel=1e-5):
    """Within `rel` of the largest |element| of `want` (normwise), and of the same shape."""
    assert got.shape == want.shape, what
    bound = rel * float(want.detach().abs().max()) + 1e-30
    err = float((got.detach().double() - want.detach().double()).abs().max())
    assert err <= bound, f"{what}: max error {err:.3g} > {bound:.3g}"


# -- the plain-PyTorch layer ------------------------------------------------------------------------------------
class PlainMoE(torch.nn.Module):
    """The same layer in plain PyTorch: sqrt-softplus top-k gate with torch.topk, tokens sorted by expert with
    argsort, gathered with index_select, each expert's rows through its gate/up and down matrices, combined
    with index_add."""

    def __init__(self, layer):
        super().__init__()
        self.router = torch.nn.Parameter(layer.router.detach().clone())
        self.gate_up = torch.nn.Parameter(layer.gate_up.detach().clone())
        self.down = torch.nn.Parameter(layer.down.detach().clone())

    def forward(self, x):
        u = torch.sqrt(torch.nn.functional.softplus(x @ self.router.t()))
        idx = torch.topk(u, TOPK, dim=-1).indices
        picked = u.gather(1, idx)
        weights = picked / (picked.sum(-1, keepdim=True) + 1e-20) * SCALE
        order = torch.argsort(idx.reshape(-1), stable=True)
        token = order // TOPK
        rows = x.index_select(0, token)
        w = weights.reshape(-1).index_select(0, order)
        counts = torch.bincount(idx.reshape(-1), minlength=EXPERTS).tolist()
        outs = []
        for e, (r, ww) in enumerate(zip(rows.split(counts), w.split(counts))):
            a, b = (r @ self.gate_up[e]).chunk(2, dim=-1)
            outs.append((torch.nn.functional.silu(a) * b * ww[:, None]) @ self.down[e])
        return torch.zeros_like(x).index_add(0, token, torch.cat(outs))


def loss_of(layer, x, target):
    return ((layer(x) - target) ** 2).mean()


def train(layer, x, target, step_fn=None):
    """(losses, per step the gradients of every parameter and of x) over STEPS steps of SGD."""
    opt = torch.optim.SGD(layer.parameters(), lr=LR)
    step_fn = step_fn or (lambda x: loss_of(layer, x, target))
    losses, grads = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        xi = x.detach().clone().requires_grad_(True)
        loss = step_fn(xi)
        loss.backward()
        losses.append(loss.detach())
        grads.append({**{n: p.grad.detach().clone() for n, p in layer.named_parameters()}, "x": xi.grad.clone()})
        opt.step()
    return losses, grads


def layers(weights_in, seed=0):
    torch.manual_seed(seed)
    layer = tnn.MoE(HIDDEN, INTERMEDIATE, EXPERTS, TOPK, alignment=ALIGNMENT, routed_scaling_factor=SCALE,
                    weights_in=weights_in)
    x, target = torch.randn(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN) * 0.1
    return layer, PlainMoE(layer), x, target


@pytest.mark.parametrize("mode", ["eager-swiglu", "eager-reduce", "compiled-swiglu"])
def test_training_matches_plain_pytorch(mode):
    """The routing weights applied in the SwiGLU or in the reduce: the same loss curve and, at every step,
    the same gradients of the router, the expert weights and the input. Compiled: the whole training step
    (forward and backward) under torch.compile(fullgraph=True) with the default backend (inductor; a graph
    break would raise), the tkgen ops opaque in its graphs through their fake implementations."""
    compiled = mode.startswith("compiled")
    layer, plain, x, target = layers(mode.split("-")[1])
    step = torch.compile(lambda x: loss_of(layer, x, target), fullgraph=True) if compiled else None
    got_losses, got_grads = train(layer, x, target, step)
    want_losses, want_grads = train(plain, x, target)
    assert float(want_losses[-1]) < 0.9 * float(want_losses[0])         # it trains
    for i, (gl, wl, gg, wg) in enumerate(zip(got_losses, want_losses, got_grads, want_grads)):
        close(gl, wl, f"loss at step {i}", rel=1e-6)
        for name in wg:
            close(gg[name], wg[name], f"{name} gradient at step {i}")


# -- each step against float64 autograd --------------------------------------------------------------------------
def mapping(tokens=23, topk=3, experts=5, alignment=4, seed=1):
    """A routing with distinct experts per token and three slots not routed (-1), its fused mapping sized by
    the upper bound (padding inside segments and past the last one)."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(tokens)])
    idx[[2, 9, 9], [0, 1, 2]] = -1
    rows = -(-(tokens * topk + (alignment - 1) * experts) // alignment) * alignment
    pos_to_expert, _, _, token_topk_to_pos, *_ = F.get_fused_mapping(idx, experts, rows, alignment)
    return gen, token_topk_to_pos, pos_to_expert


def expand64(x, pos, rows):
    out = x.new_zeros(rows, x.shape[1])
    t, k = torch.nonzero(pos >= 0, as_tuple=True)
    return out.index_put((pos[t, k].long(),), x[t])


def reduce64(x, w, pos):
    gathered = torch.where((pos >= 0)[..., None], x[pos.clamp(min=0).long()], 0.0)
    return (gathered * w[..., None]).sum(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_expand_and_reduce_gradients_match_float64(dtype):
    """moe_expand (its backward a gather-sum) and moe_reduce (backward: the scatter scaled by the weights and
    the per-(token, k) dot products) against float64 autograd. float32: to 1e-6 of the largest element (sums
    of at most 3 terms, or 48-channel dot products, in float32); bf16 outputs and input gradients: to one
    rounding of the float64 value (2^-8 relative), the weight gradient summed in float32 from bf16 inputs."""
    gen, pos, pos_to_expert = mapping()
    T, K = pos.shape
    rows, H = pos_to_expert.shape[0], 48
    x = torch.randn(T, H, generator=gen).to(dtype).requires_grad_(True)
    ye = torch.randn(rows, H, generator=gen).to(dtype).requires_grad_(True)
    w = (torch.rand(T, K, generator=gen) + 0.1).requires_grad_(True)
    ge, gr = torch.randn(rows, H, generator=gen).to(dtype), torch.randn(T, H, generator=gen).to(dtype)
    rel = 1e-6 if dtype == torch.float32 else 2 ** -8

    out = F.moe_expand(x, pos, pos_to_expert)
    x64 = x.detach().double().requires_grad_(True)
    want = expand64(x64, pos, rows)
    assert torch.equal(out.double(), want.detach())                      # a copy, padding rows zero
    (gx,) = torch.autograd.grad(out, x, ge)
    (wx,) = torch.autograd.grad(want, x64, ge.double())
    close(gx, wx, "expand: x gradient", rel)

    out = F.moe_reduce(ye, w, pos, pos_to_expert)
    y64, w64 = ye.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    want = reduce64(y64, w64, pos)
    close(out, want.detach(), "reduce", rel)
    gy, gw = torch.autograd.grad(out, (ye, w), gr)
    wy, ww = torch.autograd.grad(want, (y64, w64), gr.double())
    close(gy, wy, "reduce: x gradient", rel)
    assert not gy[pos_to_expert < 0].any()                               # padding rows: zero
    close(gw, ww, "reduce: weight gradient", 1e-5)
    assert not gw[pos < 0].any()                                         # slots not routed: zero

    # unit weights (None): the weights' gradient is not asked for
    (gy1,) = torch.autograd.grad(F.moe_reduce(ye, None, pos, pos_to_expert), ye, gr)
    close(gy1, torch.autograd.grad(reduce64(y64, torch.ones_like(w64), pos), y64, gr.double())[0],
          "reduce, unit weights: x gradient", rel)


def test_gate_gradient_matches_float64():
    """moe_gate's weights and their gradient with respect to the logits (moe_topk_gate_backward) against
    float64 autograd of sqrt(softplus), on the experts it selected; a masked token gets zero gradients. The
    logits reach 25 (past softplus's threshold 20) and 1e-3 (u^2 < 1, the backward's polynomial)."""
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(37, 12, generator=gen) * 4
    logits[3, 5], logits[4, 7] = 25.0, 1e-3
    mask = torch.ones(37, dtype=torch.int32)
    mask[6] = 0
    logits.requires_grad_(True)
    idx, w = F.moe_gate(logits, 4, mask=mask, routed_scaling_factor=SCALE)
    g = torch.randn(37, 4, generator=gen)
    (got,) = torch.autograd.grad(w, logits, g)

    l64 = logits.detach().double().requires_grad_(True)
    u = torch.sqrt(torch.nn.functional.softplus(l64))
    sel = u.gather(1, idx.clamp(min=0))
    want_w = sel / (sel.sum(-1, keepdim=True) + 1e-20) * SCALE * (mask[:, None] != 0)
    (want,) = torch.autograd.grad(want_w, l64, g.double())
    assert bool((idx[6] == -1).all()) and not w[6].any() and not got[6].any()
    assert torch.equal(idx[mask != 0], torch.topk(u.detach(), 4, dim=-1).indices[mask != 0])
    close(w, want_w.detach(), "gate weights", 1e-6)
    close(got, want, "gate: logits gradient", 1e-5)


@pytest.mark.parametrize("name", ["moe_gate", "moe_expand", "moe_reduce"])
def test_ops_pass_torch_library_checks(name):
    """Schema, fake (meta) implementation and autograd registration of each op, by torch.library.opcheck."""
    gen, pos, pos_to_expert = mapping()
    T, K = pos.shape
    args = {
        "moe_gate": lambda: (torch.randn(T, 6, generator=gen).requires_grad_(True), None, None, 2, SCALE),
        "moe_expand": lambda: (torch.randn(T, 8, generator=gen).requires_grad_(True), pos, pos_to_expert),
        "moe_reduce": lambda: (torch.randn(pos_to_expert.shape[0], 8, generator=gen).requires_grad_(True),
                               torch.rand(T, K, generator=gen).requires_grad_(True), pos, pos_to_expert),
    }[name]()
    torch.library.opcheck(getattr(torch.ops.tkgen_nn, name).default, args)
