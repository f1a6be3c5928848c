"""Modules around the differentiable functions of `tkgen.nn.functional` (generated forward and backward
kernels, through torch.library ops with registered autograd formulas)."""
import torch

from . import functional
from .moe_mapping import upper_bound


class SwiGLU(torch.nn.Module):
    """y = silu(a) * b for x = [a, b] split in halves along the last dim, times the row weight; with a clamp,
    a = min(a, c) and b = clamp(b, -c, c) first. The MoE options of `functional.swiglu`: per-row weights or
    routing weights read at positions, padding rows (pos_to_expert == -1 or a negative position: left as
    the output buffer held them, zero gradients), the routed scaling factor. Returns y only (the forward op
    under `tkgen.ops` also returns the clamp counters)."""

    def __init__(self, routed_scaling_factor=1.0, clamp=None):
        super().__init__()
        self.routed_scaling_factor, self.clamp = routed_scaling_factor, clamp

    def forward(self, x, weights=None, pos_to_token_topk=None, topk_weights=None, pos_to_expert=None):
        return functional.swiglu(x, weights=weights, pos_to_token_topk=pos_to_token_topk, topk_weights=topk_weights,
                                 pos_to_expert=pos_to_expert, fmt="fp32" if x.dtype == torch.float32 else "bf16",
                                 routed_scaling_factor=self.routed_scaling_factor, clamp=self.clamp)


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dim with a learnable weight (in the dtype the inputs will have)."""

    def __init__(self, hidden, eps=1e-6, dtype=torch.bfloat16, device=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=dtype, device=device))

    def forward(self, x, residual=None):
        return functional.rms_norm(x, self.weight.shape, self.weight, self.eps, residual=residual)


class MHC(torch.nn.Module):
    """A sublayer wrapped in a manifold hyper-connection: the residual holds `mhc_mult` streams of `hidden`
    channels; per token, `functional.mhc_pre` mixes them into the sublayer's input and gives the post and
    comb (Sinkhorn-normalized) mixes, and `functional.mhc_residual` forms the next residual from the sublayer's
    output. The projection `fn`, `scale` and `base` are learnable (float32)."""

    def __init__(self, sublayer, hidden, mhc_mult=4, *, norm_eps=1e-6, post_mult_value=2.0, pre_eps=1e-6,
                 sinkhorn_eps=1e-6, sinkhorn_repeat=10, init_std=1e-2, device=None):
        super().__init__()
        m = mhc_mult
        self.sublayer, self.mhc_mult = sublayer, m
        self.options = dict(norm_eps=norm_eps, mhc_mult=m, post_mult_value=post_mult_value, pre_eps=pre_eps,
                            sinkhorn_eps=sinkhorn_eps, sinkhorn_repeat=sinkhorn_repeat)
        self.fn = torch.nn.Parameter(torch.randn(m * (m + 2), m * hidden, device=device) * init_std)
        self.scale = torch.nn.Parameter(torch.ones(3, device=device))
        self.base = torch.nn.Parameter(torch.zeros(m * (m + 2), device=device))

    def forward(self, residual):
        layer_input, (post, comb) = functional.mhc_pre(residual, self.fn, self.scale, self.base, **self.options)
        return functional.mhc_residual(self.sublayer(layer_input), residual, post, comb)


class MHCHead(torch.nn.Module):
    """The streams of an mHC residual mixed into one hidden state (`functional.mhc_head`), with learnable
    `fn` (m, m * hidden), `scale` (1,) and `base` (m,)."""

    def __init__(self, hidden, mhc_mult=4, *, norm_eps=1e-6, pre_eps=1e-6, init_std=1e-2, device=None):
        super().__init__()
        m = mhc_mult
        self.options = dict(norm_eps=norm_eps, mhc_mult=m, pre_eps=pre_eps)
        self.fn = torch.nn.Parameter(torch.randn(m, m * hidden, device=device) * init_std)
        self.scale = torch.nn.Parameter(torch.ones(1, device=device))
        self.base = torch.nn.Parameter(torch.zeros(m, device=device))

    def forward(self, residual):
        return functional.mhc_head(residual, self.fn, self.scale, self.base, **self.options)



class EngramGate(torch.nn.Module):
    """Engram's gate with its two learnable [hc, D] weights (`functional.engram_gate`): forward(x, k, v)
    over x, k [*, hc, D] and v [*, D]."""

    def __init__(self, heads, hidden, clamp_value=1e-6, eps=1e-20, dtype=torch.bfloat16, device=None):
        super().__init__()
        self.clamp_value, self.eps = clamp_value, eps
        self.weight_hidden = torch.nn.Parameter(torch.ones(heads, hidden, dtype=dtype, device=device))
        self.weight_embed = torch.nn.Parameter(torch.ones(heads, hidden, dtype=dtype, device=device))

    def forward(self, x, k, v):
        return functional.engram_gate(x, k, v, self.weight_hidden, self.weight_embed, self.clamp_value, self.eps)


def expert_matmul(x, weight, pos_to_expert, alignment):
    """x [T_exp, n] times weight [E, n, m] of each row's expert, as one torch.bmm over blocks of `alignment`
    rows: in the layout of `get_fused_mapping` each expert's segment starts at a multiple of the alignment and
    is a whole number of blocks long, so every block holds rows of one expert (then its padding), or padding
    only (past the last segment; any weight serves, its rows are zero). It gathers one weight per block
    (blocks x n x m elements): plain and traceable, not a grouped GEMM."""
    rows = x.shape[0]
    expert = pos_to_expert.view(rows // alignment, alignment).amax(1).clamp(min=0)
    return torch.bmm(x.view(rows // alignment, alignment, -1), weight[expert]).view(rows, -1)


class MoE(torch.nn.Module):
    """A routed MoE layer on tkgen's kernels, differentiable end to end: logits = x @ router^T (float32), the
    gate (`functional.moe_gate`), the mapping (`functional.get_fused_mapping`, sized by its upper bound so
    that no step waits for the host), expand (`functional.moe_expand`), the experts' gate and up projection,
    the generated SwiGLU with positions (padding rows skipped), the down projection, reduce
    (`functional.moe_reduce`). The routing weights multiply the activation inside the SwiGLU
    (`weights_in="swiglu"`, TileKernels' place) or the rows in the reduce (`"reduce"`); either way their
    gradient reaches the router. The expert GEMMs are torch (`expert_matmul`: a bmm over blocks of
    `alignment` rows). Parameters: router [E, hidden] float32, gate_up [E, hidden, 2 * intermediate] and
    down [E, intermediate, hidden] in `dtype` (bf16 or float32, the dtype of x)."""

    def __init__(self, hidden, intermediate, num_experts, num_topk, *, alignment=16, routed_scaling_factor=1.0,
                 weights_in="swiglu", dtype=torch.float32, device=None):
        super().__init__()
        if weights_in not in ("swiglu", "reduce"):
            raise ValueError(f"MoE: weights_in is 'swiglu' or 'reduce', got {weights_in!r}")
        self.num_experts, self.num_topk, self.alignment = num_experts, num_topk, alignment
        self.routed_scaling_factor, self.weights_in = routed_scaling_factor, weights_in
        init = lambda *shape, fan_in: torch.randn(*shape, device=device) / fan_in ** 0.5  # noqa: E731
        self.router = torch.nn.Parameter(init(num_experts, hidden, fan_in=hidden))
        self.gate_up = torch.nn.Parameter(init(num_experts, hidden, 2 * intermediate, fan_in=hidden).to(dtype))
        self.down = torch.nn.Parameter(init(num_experts, intermediate, hidden, fan_in=intermediate).to(dtype))

    def forward(self, x):
        """x [T, hidden] -> [T, hidden] in x's dtype."""
        F, e, a = functional, self.num_experts, self.alignment
        topk_idx, topk_weights = F.moe_gate(x.float() @ self.router.t(), self.num_topk,
                                            routed_scaling_factor=self.routed_scaling_factor)
        rows = upper_bound(x.shape[0], self.num_topk, e, a)
        pos_to_expert, _, pos_to_token_topk, token_topk_to_pos, *_ = F.get_fused_mapping(topk_idx, e, rows, a)
        h = expert_matmul(F.moe_expand(x, token_topk_to_pos, pos_to_expert), self.gate_up, pos_to_expert, a)
        in_swiglu = self.weights_in == "swiglu"
        act = F.swiglu(h, pos_to_token_topk=pos_to_token_topk if in_swiglu else None,
                       topk_weights=topk_weights if in_swiglu else None, pos_to_expert=pos_to_expert,
                       fmt="fp32" if x.dtype == torch.float32 else "bf16")
        # the SwiGLU leaves the padding rows unwritten (uninitialised): zero them before the down projection
        act = torch.where(pos_to_expert[:, None] >= 0, act, 0.0)
        y = expert_matmul(act, self.down, pos_to_expert, a)
        return F.moe_reduce(y, None if in_swiglu else topk_weights, token_topk_to_pos, pos_to_expert)


__all__ = ["functional", "SwiGLU", "RMSNorm", "MHC", "MHCHead", "EngramGate", "MoE"]
