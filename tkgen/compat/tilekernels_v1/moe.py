"""`tile_kernels.moe` of TileKernels' first release, on tkgen's kernels."""
from __future__ import annotations

import torch

from ...nn import moe_mapping as mapping
from .._common import checks_values, int_arg, value_bounds, within, ops, require, tensor_arg
from ...nn.moe_layout import expand_to_fused, expand_to_fused_with_sf, reduce_fused
from ..tilekernels.moe import topk_gate  # noqa: F401  (the same signature)
from ..tilekernels.moe import fixed_routing, flag, physical_map

_MAX_K = 64        # mask_indices_by_tp's indices per row in one kernel (more are taken one per row)


def normalize_weight(topk_weights):
    """(denominator [T], normalized [T, K]): 1e-20 + w[0] + w[1] + ... in order, and w / denominator."""
    return ops().normalize_weight_sequential(topk_weights)


def mask_indices_by_tp(indices, n: int, num_ep_ranks: int, tp_rank: int, num_tp_ranks: int):
    """The indices of every EP rank mapped to this TP rank's experts (-1 where another rank has them), in
    the dtype and shape of `indices` (int32 is taken as int64 and back: the values fit)."""
    tensor_arg("moe.mask_indices_by_tp", "indices", indices, (torch.int32, torch.int64))
    rows = indices.reshape(-1, indices.shape[-1]) if indices.dim() and indices.shape[-1] <= _MAX_K \
        else indices.reshape(-1, 1)
    out = ops().mask_indices_by_tp(rows.to(torch.int64).contiguous(), n, num_ep_ranks, tp_rank, num_tp_ranks)
    return out.to(indices.dtype).reshape(indices.shape)


def _counted(name, arg, ids, num, what):
    """Ids that a count bins: int64 [T, K], none at or past `num` (a negative id counts nothing)."""
    tensor_arg(name, arg, ids, (torch.int64,), 2, "[T, K]")
    if checks_values(ids):
        within(name, arg, value_bounds(ids)[0], None, num - 1, f" (one of the {num} {what}, or negative for none)")


def group_count(group_idx, num_groups: int):
    """int32 [num_groups]: how many entries of group_idx [T, K] hold each group in [0, num_groups) (others,
    negative or past the groups, count nothing: a count of some groups only is a use)."""
    int_arg("moe.group_count", "num_groups", num_groups, 1, 1024)
    tensor_arg("moe.group_count", "group_idx", group_idx, (torch.int64,), 2, "[T, K]")
    return ops().group_count(group_idx, num_groups)


def aux_fi(topk_idx, num_experts: int, num_aux_topk: int):
    """float32 [num_experts]: count[e] * num_experts / (T * num_aux_topk), from the exact counts of
    group_count (TileKernels adds per-block float shares atomically, in no fixed order); zeros for T = 0."""
    name = "moe.aux_fi"
    int_arg(name, "num_experts", num_experts, 1, 1024)
    int_arg(name, "num_aux_topk", num_aux_topk, 1)
    _counted(name, "topk_idx", topk_idx, num_experts, "experts")
    count = ops().group_count(topk_idx, num_experts)
    tokens = topk_idx.shape[0]
    if tokens == 0:
        return torch.zeros(num_experts, dtype=torch.float32, device=topk_idx.device)
    return count.to(torch.float32) * num_experts / (tokens * num_aux_topk)


def topk_sum_and_topk_group_idx(scores, num_topk_sum: int, num_topk_groups: int):
    """int64 [T, num_topk_groups]: the best groups of scores [T, G, E_pg], a group scoring the sum of its
    num_topk_sum largest scores; ties to the smaller group index."""
    return ops().topk_sum_and_topk_group_idx(scores, num_topk_sum, num_topk_groups)


def top2_sum_gate(logits, bias, num_topk: int, num_topk_groups: int, num_groups: int, use_shared_as_routed: bool,
                  num_shared_experts: int, routed_scaling_factor: float, ep_rank: int, num_ep_ranks: int, tp_rank: int,
                  num_tp_ranks: int, scoring_func: str, mask=None, fix_routing_mask=None, to_physical_map=None,
                  logical_count=None, unmapped_topk_idx=None):
    """(topk_idx int64 [T, num_topk + S], topk_weights float32 [T, num_topk + S]): grouped routing by the sum
    of each group's two largest biased scores (or, on the tokens fix_routing_mask marks, the row of
    unmapped_topk_idx as given), S shared experts as routed slots (index E + s, weight 1.0) with
    use_shared_as_routed; with to_physical_map, each slot's logical id l becomes
    to_physical_map[l, (ep_rank + t * 23333) mod logical_count[l]] (int32 arithmetic); then the EP/TP remap
    over E + D - 1 physical experts (D the map's columns). The selection before the map and the remap is
    written to `unmapped_topk_idx` when given (in/out)."""
    name = "moe.top2_sum_gate"
    require(scoring_func in ("sigmoid", "sqrtsoftplus", "softmax"), name, "scoring_func",
            f"must be 'sigmoid', 'sqrtsoftplus' or 'softmax', got {scoring_func!r}")
    require((num_groups == 0) == (num_topk_groups == 0), name, "num_topk_groups",
            f"and `num_groups` must be both 0 or both > 0, got {num_topk_groups!r} and {num_groups!r}")
    tensor_arg(name, "logits", logits, (torch.float32,), 2, "[T, E]")
    rows, experts = logits.shape
    shared = num_shared_experts if use_shared_as_routed else 0
    pmap, count, dups = physical_map(name, to_physical_map, logical_count, experts + shared)
    if shared:
        require(shared in (1, 2), name, "num_shared_experts",
                f"must be 1 or 2 with use_shared_as_routed, got {num_shared_experts!r}")
        require(shared <= dups - 1, name, "to_physical_map",
                f"must have at least num_shared_experts ({shared}) extra duplicates (columns beyond the first) "
                f"with use_shared_as_routed, got {'none' if pmap is None else dups - 1}")
        require(num_topk % shared == 0 and experts % (num_topk // shared) == 0, name, "num_shared_experts",
                f"must divide num_topk ({num_topk}), and num_topk / num_shared_experts the experts ({experts})")
    fixed = fixed_routing(name, fix_routing_mask, unmapped_topk_idx, rows, num_topk)
    routed = None if mask is None else flag(name, "mask", mask, rows)
    idx, weights, unmapped = ops().top2_sum_gate(
        logits.contiguous(), bias, num_topk, num_groups or 1, num_topk_groups or 1, num_ep_ranks, tp_rank,
        num_tp_ranks, mask=routed, num_shared=shared, fix_routing_mask=fixed,
        unmapped_topk_idx=None if fixed is None else unmapped_topk_idx.contiguous(), to_physical_map=pmap,
        logical_count=count, scoring=scoring_func, routed_scaling_factor=routed_scaling_factor,
        ep_rank=ep_rank if pmap is not None else 0, num_dups=dups)
    if unmapped_topk_idx is not None:
        unmapped_topk_idx.copy_(unmapped)
    return idx, weights


def inplace_unique_group_indices(group_indices, num_groups: int):
    """In place on group_indices [T, K] int64: a group index already seen earlier in its row becomes -1
    (negative entries stay). Returns None."""
    name = "moe.inplace_unique_group_indices"
    int_arg(name, "num_groups", num_groups, 1, 128)
    _counted(name, "group_indices", group_indices, num_groups, "groups")
    require(group_indices.is_contiguous(), name, "group_indices", "must be contiguous (it is written in place)")
    ops().inplace_unique_group_indices(group_indices)


def get_fused_mapping(topk_idx, num_experts: int, num_expanded_tokens: int, alignment: int,
                      force_no_sync: bool = False):
    """(pos_to_expert, pos_to_token, pos_to_token_topk, token_topk_to_pos, expert_start, expert_end,
    num_tokens_per_expert, num_tokens_per_expert_list): the expert-major layout of topk_idx [T, K] (int64,
    -1 for none), segments aligned to `alignment`, -1 on padding rows; num_expanded_tokens = 0 sizes it
    (with a host sync unless force_no_sync). Inside a segment the pairs are in ascending t * K + k, where
    TileKernels' order depends on its number of SMs (the tests of both check invariants)."""
    return mapping.get_fused_mapping(topk_idx, num_experts, num_expanded_tokens, alignment, force_no_sync)


__all__ = ["get_fused_mapping", "aux_fi", "expand_to_fused", "expand_to_fused_with_sf", "group_count",
                      "inplace_unique_group_indices", "mask_indices_by_tp", "normalize_weight", "reduce_fused",
                      "top2_sum_gate", "topk_gate", "topk_sum_and_topk_group_idx"]
