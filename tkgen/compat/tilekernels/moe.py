"""`tile_kernels.moe` of TileKernels 2.1.0, on tkgen's kernels."""
import torch

from .._common import need, ops, require, routing_ids, tensor_arg


def topk_gate(scores, num_topk: int):
    """The indices (int64 [T, num_topk]) of the largest scores of each row; ties go to the smaller index."""
    return ops().topk_gate(scores, num_topk)


def normalize_weight(topk_weights):
    """(denominator [T], normalized [T, K]): the weights' sum by the xor butterfly's tree, plus 1e-20, and
    the weights divided by it (K <= 32)."""
    return ops().normalize_weight(topk_weights)


def _sqrtsoftplus(name, scoring_func):
    require(scoring_func == "sqrtsoftplus", name, "scoring_func",
            f"must be 'sqrtsoftplus' (TileKernels 2.1.0 scores with it only), got {scoring_func!r}")


def moe_topk_gate_forward(logits, num_topk: int, use_shared_as_routed: bool, num_shared_experts: int,
                          routed_scaling_factor: float, ep_rank: int, scoring_func: str = "sqrtsoftplus", mask=None,
                          bias=None, image_bias=None, image_token_mask=None, fix_routing_mask=None,
                          to_physical_map=None, logical_count=None, unmapped_topk_idx=None, force_random=None,
                          out=None, scores=None):
    """(topk_idx int64 [T, K + S], topk_weights float32 [T, K + S]): sqrt-softplus scores, the top K of
    scores + bias, weights normalized by the butterfly tree's sum times routed_scaling_factor, then S shared
    experts (index E + s, weight 1.0) with use_shared_as_routed; masked tokens -1 / 0. `scores` receives
    the unbiased scores (0 on masked tokens), `unmapped_topk_idx` the routed selection. ep_rank is used only
    by the physical map and force_random, which tkgen does not have."""
    name = "moe.moe_topk_gate_forward"
    _sqrtsoftplus(name, scoring_func)
    need(image_bias is None and image_token_mask is None, name, "with image_bias")
    need(fix_routing_mask is None, name, "with fix_routing_mask")
    need(to_physical_map is None and logical_count is None, name, "with to_physical_map")
    need(force_random is None, name, "with force_random")
    shared = num_shared_experts if use_shared_as_routed else 0
    require(shared in (0, 1, 2), name, "num_shared_experts",
            f"must be 1 or 2 with use_shared_as_routed, got {num_shared_experts!r}")
    routed = None if mask is None else mask.to(torch.int32)
    idx, weights, u = ops().moe_topk_gate_forward(logits.contiguous(), num_topk, num_topk + shared, mask=routed,
                                                  bias=bias, routed_scaling_factor=routed_scaling_factor)
    if scores is not None:
        scores.copy_(u)
    if unmapped_topk_idx is not None:           # without a physical map, the routed slots are the logical ids
        unmapped_topk_idx.copy_(idx[:, :num_topk])
    if out is not None:
        out[0].copy_(idx)
        out[1].copy_(weights)
        return out
    return idx, weights


moe_topk_gate = moe_topk_gate_forward


def moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor: float,
                           scoring_func: str = "sqrtsoftplus", mask=None, grad_scores_sum=None, out=None):
    """grad_logits float32 [T, E] from the forward's scores and logical indices (-1: not routed)."""
    name = "moe.moe_topk_gate_backward"
    _sqrtsoftplus(name, scoring_func)
    need(grad_scores_sum is None, name, "with grad_scores_sum (the sequence-level auxiliary term)")
    tensor_arg(name, "scores", scores, (torch.float32,), 2, "[T, E]")
    routing_ids(name, "topk_idx", topk_idx, scores.shape[1])
    grad = ops().moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor)
    if out is not None:
        out.copy_(grad)
        return out
    return grad


def get_mapping_from_psum(psum_num_tokens_per_expert, alignment: int, num_expanded_tokens: int):
    """int32 [num_expanded_tokens]: the expert of each row of the psum layout (expert e's valid rows are
    [align(psum[e-1], alignment), psum[e])), -1 on padding rows; `>= 0` is the mask of valid rows.
    (TileKernels' torch reference returns the mask; tkgen's op returns the experts, which the mask is.)"""
    from ...nn.moe_mapping import from_psum
    return from_psum(psum_num_tokens_per_expert, alignment, num_expanded_tokens)


__all__ = ["get_mapping_from_psum", "normalize_weight", "moe_topk_gate", "moe_topk_gate_forward", "moe_topk_gate_backward",
           "topk_gate"]
