"""`tile_kernels.moe` of TileKernels' first release, on tkgen's kernels."""
from .._common import missing
from .._moe_layout import expand_to_fused, expand_to_fused_with_sf, reduce_fused  # noqa: F401
from ..tilekernels.moe import topk_gate  # noqa: F401  (the same signature)

_MISSING = ["get_fused_mapping", "inplace_unique_group_indices", "aux_fi", "group_count", "mask_indices_by_tp", "normalize_weight",
            "top2_sum_gate", "topk_sum_and_topk_group_idx"]
globals().update({n: missing(f"moe.{n}", "1.0") for n in _MISSING})

__all__ = _MISSING + ["expand_to_fused", "expand_to_fused_with_sf", "reduce_fused", "topk_gate"]
