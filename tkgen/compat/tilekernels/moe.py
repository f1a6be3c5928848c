"""`tile_kernels.moe` of TileKernels 2.1.0, on tkgen's kernels."""
from .._common import missing, ops


def topk_gate(scores, num_topk: int):
    """The indices (int64 [T, num_topk]) of the largest scores of each row; ties go to the smaller index."""
    return ops().topk_gate(scores, num_topk)


normalize_weight = missing("moe.normalize_weight", "2.1.0")
moe_topk_gate = missing("moe.moe_topk_gate", "2.1.0")
moe_topk_gate_forward = missing("moe.moe_topk_gate_forward", "2.1.0")
moe_topk_gate_backward = missing("moe.moe_topk_gate_backward", "2.1.0")

__all__ = ["normalize_weight", "moe_topk_gate", "moe_topk_gate_forward", "moe_topk_gate_backward", "topk_gate"]
