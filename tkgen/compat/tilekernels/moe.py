"""`tile_kernels.moe` of TileKernels 2.1.0, on tkgen's kernels."""
import torch

from ...runtime.arguments import need
from .._common import ops, require, routing_ids, tensor_arg


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


def flag(name, arg, t, rows):
    """A bool (or integer 0/1) mask [T] as the int32 flags of tkgen's ops."""
    tensor_arg(name, arg, t, (torch.bool, torch.int32, torch.int64, torch.uint8), 1, "[T]")
    require(t.shape[0] == rows, name, arg, f"must have one entry per token ({rows}), got shape {tuple(t.shape)}")
    return t.to(torch.int32)


def physical_map(name, to_physical_map, logical_count, logical):
    """(to_physical_map, logical_count, num_dups) checked: int32 [logical, D] and int32 [logical], both or
    neither."""
    require((to_physical_map is None) == (logical_count is None), name, "logical_count",
            "and `to_physical_map` go together: give both or neither")
    if to_physical_map is None:
        return None, None, 1
    tensor_arg(name, "to_physical_map", to_physical_map, (torch.int32,), 2, "[E + S, D]")
    tensor_arg(name, "logical_count", logical_count, (torch.int32,), 1, "[E + S]")
    require(to_physical_map.shape[0] == logical and logical_count.shape[0] == logical, name, "to_physical_map",
            f"and `logical_count` must have {logical} rows (routed experts, then shared ones), got shapes "
            f"{tuple(to_physical_map.shape)} and {tuple(logical_count.shape)}")
    return to_physical_map.contiguous(), logical_count.contiguous(), to_physical_map.shape[1]


def fixed_routing(name, fix_routing_mask, unmapped_topk_idx, rows, num_topk):
    """The fixed-routing flags [T] as int32 (None without them), after checking `unmapped_topk_idx` [T, K]
    int64, which holds the fixed selections (given with fix_routing_mask, or alone as the output)."""
    require(fix_routing_mask is None or unmapped_topk_idx is not None, name, "unmapped_topk_idx",
            "must be given with fix_routing_mask (it holds the fixed selections)")
    if unmapped_topk_idx is not None:
        tensor_arg(name, "unmapped_topk_idx", unmapped_topk_idx, (torch.int64,), 2, "[T, K]")
        require(tuple(unmapped_topk_idx.shape) == (rows, num_topk) and unmapped_topk_idx.stride(-1) == 1, name,
                "unmapped_topk_idx", f"must have shape ({rows}, {num_topk}) with a last stride of 1, got shape "
                f"{tuple(unmapped_topk_idx.shape)} and strides {tuple(unmapped_topk_idx.stride())}")
    return None if fix_routing_mask is None else flag(name, "fix_routing_mask", fix_routing_mask, rows)


def moe_topk_gate_forward(logits, num_topk: int, use_shared_as_routed: bool, num_shared_experts: int,
                          routed_scaling_factor: float, ep_rank: int, scoring_func: str = "sqrtsoftplus", mask=None,
                          bias=None, image_bias=None, image_token_mask=None, fix_routing_mask=None,
                          to_physical_map=None, logical_count=None, unmapped_topk_idx=None, force_random=None,
                          out=None, scores=None):
    """(topk_idx int64 [T, K + S], topk_weights float32 [T, K + S]): sqrt-softplus scores, the top K of
    scores + bias (image_bias on the tokens image_token_mask marks), or the row of unmapped_topk_idx on
    the tokens fix_routing_mask marks; weights normalized by the butterfly tree's sum times
    routed_scaling_factor, then S shared experts (index E + s, weight 1.0) with use_shared_as_routed; with
    to_physical_map, every slot's logical id l becomes to_physical_map[l, (ep_rank + t * 23333) mod
    logical_count[l]] (int32 arithmetic); masked tokens -1 / 0. `scores` receives the unbiased scores (0 on
    masked tokens), `unmapped_topk_idx` (in/out) the routed selection, logical, -1 on masked tokens."""
    name = "moe.moe_topk_gate_forward"
    _sqrtsoftplus(name, scoring_func)
    need(force_random is None, name, "with force_random")
    tensor_arg(name, "logits", logits, (torch.float32,), 2, "[T, E]")
    rows, experts = logits.shape
    shared = num_shared_experts if use_shared_as_routed else 0
    require(shared in (0, 1, 2), name, "num_shared_experts",
            f"must be 1 or 2 with use_shared_as_routed, got {num_shared_experts!r}")
    require((image_bias is None) == (image_token_mask is None), name, "image_token_mask",
            "and `image_bias` go together: give both or neither")
    fixed = fixed_routing(name, fix_routing_mask, unmapped_topk_idx, rows, num_topk)
    pmap, count, dups = physical_map(name, to_physical_map, logical_count, experts + shared)
    image = None if image_token_mask is None else flag(name, "image_token_mask", image_token_mask, rows)
    routed = None if mask is None else flag(name, "mask", mask, rows)
    outs = ops().moe_topk_gate_forward(
        logits.contiguous(), num_topk, num_topk + shared, mask=routed, bias=bias, image_bias=image_bias,
        image_token_mask=image, fix_routing_mask=fixed,
        unmapped_topk_idx=None if fixed is None else unmapped_topk_idx.contiguous(), to_physical_map=pmap,
        logical_count=count, routed_scaling_factor=routed_scaling_factor,
        ep_rank=ep_rank if pmap is not None else 0, num_dups=dups)
    # the selection (`unmapped`) comes back with the physical map; without it, the routed slots are the selection
    idx, weights, u = outs[:3]
    if scores is not None:
        scores.copy_(u)
    if unmapped_topk_idx is not None:
        unmapped_topk_idx.copy_(outs[3] if pmap is not None else idx[:, :num_topk])
    if out is not None:
        out[0].copy_(idx)
        out[1].copy_(weights)
        return out
    return idx, weights


moe_topk_gate = moe_topk_gate_forward


def moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor: float,
                           scoring_func: str = "sqrtsoftplus", mask=None, grad_scores_sum=None, out=None):
    """grad_logits float32 [T, E] from the forward's scores and logical indices (-1: not routed); with
    grad_scores_sum [N_seq, E] (given with mask; T a multiple of N_seq), the gradient of each sequence's
    sum of the normalized scores u / sum(u) over the tokens mask marks is added. `mask` is read only with
    grad_scores_sum."""
    name = "moe.moe_topk_gate_backward"
    _sqrtsoftplus(name, scoring_func)
    tensor_arg(name, "scores", scores, (torch.float32,), 2, "[T, E]")
    routing_ids(name, "topk_idx", topk_idx, scores.shape[1])
    rows, experts = scores.shape
    aux = {}
    if grad_scores_sum is not None:
        require(mask is not None, name, "mask", "must be given with grad_scores_sum (the tokens whose scores count)")
        tensor_arg(name, "grad_scores_sum", grad_scores_sum, (torch.float32,), 2, "[N_seq, E]")
        seqs = grad_scores_sum.shape[0]
        require(grad_scores_sum.shape[1] == experts and 1 <= seqs and rows % seqs == 0, name, "grad_scores_sum",
                f"must have shape [N_seq, {experts}] with N_seq >= 1 dividing the tokens ({rows}), got shape "
                f"{tuple(grad_scores_sum.shape)}")
        aux = dict(grad_scores_sum=grad_scores_sum.contiguous(), mask=flag(name, "mask", mask, rows),
                   num_seqs=seqs, seq_len=max(rows // seqs, 1))
    grad = ops().moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights,
                                        routed_scaling_factor=routed_scaling_factor, **aux)
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
