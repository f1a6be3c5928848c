"""`tile_kernels.transpose` of TileKernels' first release, on tkgen's kernels."""
from .._common import ops


def batched_transpose(x):
    """[B, M, N] -> [B, N, M], contiguous, bit for bit."""
    return ops().batched_transpose(x)


def transpose(x):
    """[M, N] -> [N, M], contiguous, bit for bit."""
    return ops().batched_transpose(x.unsqueeze(0))[0]


__all__ = ["transpose", "batched_transpose"]
