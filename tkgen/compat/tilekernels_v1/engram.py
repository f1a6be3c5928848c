"""`tile_kernels.engram` of TileKernels' first release, on tkgen's kernels."""
from ...nn.engram import engram_gate_bwd, engram_gate_fwd, engram_hash, fused_weight, grad_w_reduce

__all__ = ["engram_hash", "fused_weight", "engram_gate_fwd", "engram_gate_bwd", "grad_w_reduce"]
