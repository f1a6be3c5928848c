"""The differentiable steps of tkgen.nn's MoE layer, as `torch.library` ops (`torch.ops.tkgen_nn.*`) with
registered autograd formulas (opaque to torch.compile, which traces them with `fullgraph=True`). They
compose named generated ops, which `backward:` blocks cannot chain here (expand's gradient is reduce_fused
in x's own format, a param a block cannot take from a dtype; the gate's backward reads the routed slots
only), so they live beside the other composites over named ops. Each direction runs generated kernels:

- gate: `moe_topk_gate_forward`, backward `moe_topk_gate_backward` (the gradient reaches the logits through
  the routing weights; the selection itself is piecewise constant);
- expand: `expand_to_fused`, backward `reduce_fused` with unit weights (a gather-sum of each token's rows);
- reduce: `reduce_fused`, backward `reduce_fused_backward` (the rows scattered back scaled by the routing
  weights, and the weights' gradient as one dot product per (token, k)).

Expand and reduce take a mapping of `get_fused_mapping` (positions distinct, padding rows marked -1 in
pos_to_expert): the gradients of the expanded rows are zero on the padding rows.
"""
from typing import Optional

import torch

from .. import registry
from .moe_layout import checked_mapping

# the generated ops called below, registered with torch.library on import
for _name in ("moe_topk_gate_forward", "moe_topk_gate_backward", "expand_to_fused", "reduce_fused",
              "reduce_fused_backward"):
    registry.op_package(_name)

_FORMATS = {torch.bfloat16: "bf16", torch.float32: "fp32"}


def _format(t: torch.Tensor, what: str) -> str:
    if t.dtype not in _FORMATS:
        raise TypeError(f"{what}: expected bf16 or fp32, got {t.dtype}")
    return _FORMATS[t.dtype]


# -- gate -------------------------------------------------------------------------------------------------------
def _gate_forward(logits, mask, bias, num_topk, routed_scaling_factor):
    """(topk_weights, topk_idx, scores): the differentiable output first (torch.library.opcheck sums the
    outputs starting from the first). Also the fake: the generated op's fake gives the shapes."""
    idx, weights, scores, _ = torch.ops.tkgen.moe_topk_gate_forward(logits, mask, bias, num_topk, num_topk,
                                                                    routed_scaling_factor)
    return weights, idx, scores


@torch.library.custom_op("tkgen_nn::moe_gate", mutates_args=())
def _moe_gate(logits: torch.Tensor, mask: Optional[torch.Tensor], bias: Optional[torch.Tensor], num_topk: int,
              routed_scaling_factor: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _gate_forward(logits, mask, bias, num_topk, routed_scaling_factor)


_moe_gate.register_fake(_gate_forward)


def _gate_setup(ctx, inputs, output):
    topk_weights, topk_idx, scores = output
    ctx.mark_non_differentiable(topk_idx, scores)
    ctx.save_for_backward(scores, topk_idx, topk_weights)
    logits, mask, bias, num_topk, ctx.routed_scaling_factor = inputs


def _gate_backward(ctx, grad_weights, grad_idx, grad_scores):
    scores, topk_idx, topk_weights = ctx.saved_tensors
    grad_logits = None
    if grad_weights is not None:
        grad_logits = torch.ops.tkgen.moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_weights.contiguous(),
                                                             ctx.routed_scaling_factor)
    return grad_logits, None, None, None, None


_moe_gate.register_autograd(_gate_backward, setup_context=_gate_setup)


def moe_gate(logits, num_topk, bias=None, mask=None, routed_scaling_factor=1.0):
    """The top-k routing of TileKernels 2.1.0's gate (`moe_topk_gate_forward` with no shared slots), with the
    gradient of the routing weights with respect to the logits (`moe_topk_gate_backward`).

    logits [T, E] float32; bias [E] float32 (it steers the selection only, so it gets no gradient); mask [T]
    int32 (0: the token is not routed: indices -1, weights 0, zero gradients). Returns (topk_idx [T, num_topk]
    int64, topk_weights [T, num_topk] float32): u = sqrt(softplus(logits)), the experts of the largest
    u + bias, weights u[sel] / (sum u[sel] + 1e-20) * routed_scaling_factor."""
    topk_weights, topk_idx, _ = _moe_gate(logits, mask, bias, num_topk, float(routed_scaling_factor))
    return topk_idx, topk_weights


# -- expand ------------------------------------------------------------------------------------------------------
@torch.library.custom_op("tkgen_nn::moe_expand", mutates_args=())
def _moe_expand(x: torch.Tensor, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor) -> torch.Tensor:
    return torch.ops.tkgen.expand_to_fused(x, token_topk_to_pos, pos_to_expert)


@_moe_expand.register_fake
def _(x, token_topk_to_pos, pos_to_expert):
    return torch.ops.tkgen.expand_to_fused(x, token_topk_to_pos, pos_to_expert)


def _expand_setup(ctx, inputs, output):
    x, token_topk_to_pos, _ = inputs
    ctx.save_for_backward(token_topk_to_pos)
    ctx.fmt = _format(x, "moe_expand")


def _expand_backward(ctx, grad_out):
    (token_topk_to_pos,) = ctx.saved_tensors
    grad_x = torch.ops.tkgen.reduce_fused(grad_out.contiguous(), None, None, None, token_topk_to_pos, ctx.fmt)
    return grad_x, None, None


_moe_expand.register_autograd(_expand_backward, setup_context=_expand_setup)


def moe_expand(x, token_topk_to_pos, pos_to_expert):
    """Each token's row at each of its positions of the expanded (expert-major) layout, the padding rows zero
    (`expand_to_fused`). x [T, H] bf16 or float32; token_topk_to_pos [T, K] and pos_to_expert [T_exp] int32
    from `get_fused_mapping`. Returns [T_exp, H] in x's dtype. Gradient: each token's K rows of the gradient
    added in k order in float32 (`reduce_fused` with unit weights), rounded to x's dtype."""
    checked_mapping("moe_expand", token_topk_to_pos, pos_to_expert)
    return _moe_expand(x, token_topk_to_pos, pos_to_expert)


# -- reduce ------------------------------------------------------------------------------------------------------
@torch.library.custom_op("tkgen_nn::moe_reduce", mutates_args=())
def _moe_reduce(x: torch.Tensor, topk_weights: Optional[torch.Tensor], token_topk_to_pos: torch.Tensor,
                pos_to_expert: torch.Tensor) -> torch.Tensor:
    return torch.ops.tkgen.reduce_fused(x, topk_weights, None, None, token_topk_to_pos, _format(x, "moe_reduce"))


@_moe_reduce.register_fake
def _(x, topk_weights, token_topk_to_pos, pos_to_expert):
    return torch.ops.tkgen.reduce_fused(x, topk_weights, None, None, token_topk_to_pos, _format(x, "moe_reduce"))


def _reduce_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _reduce_backward(ctx, grad_out):
    x, topk_weights, token_topk_to_pos, pos_to_expert = ctx.saved_tensors
    grad_x, grad_weights = torch.ops.tkgen.reduce_fused_backward(grad_out.contiguous(), x, topk_weights,
                                                                 token_topk_to_pos, pos_to_expert)
    return grad_x, (grad_weights if topk_weights is not None else None), None, None


_moe_reduce.register_autograd(_reduce_backward, setup_context=_reduce_setup)


def moe_reduce(x, topk_weights, token_topk_to_pos, pos_to_expert):
    """Each token's rows of the expanded layout combined: out[t] = sum over k of topk_weights[t, k] *
    x[token_topk_to_pos[t, k]], an in-order float32 fold of fused multiply-adds skipping negative positions
    (`reduce_fused`), in x's dtype. x [T_exp, H] bf16 or float32; topk_weights [T, K] float32 or None (unit
    weights); the mapping as for `moe_expand`. Gradients (`reduce_fused_backward`): x's rows get
    grad_out[t] * topk_weights[t, k] (zero on the padding rows), the weights the dot products of grad_out[t]
    with x's rows in float32."""
    checked_mapping("moe_reduce", token_topk_to_pos, pos_to_expert)   # distinct: the backward stores at them
    return _moe_reduce(x, topk_weights, token_topk_to_pos, pos_to_expert)
