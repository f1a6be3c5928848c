"""`tile_kernels.transpose` of TileKernels' first release, on tkgen's kernels."""
from .._common import need, ops


def batched_transpose(x):
    """[B, M, N] -> [B, N, M], contiguous, bit for bit."""
    return ops().batched_transpose(x)


def transpose(x):
    """[M, N] -> [N, M], contiguous, bit for bit. TileKernels also takes a row-strided x; tkgen's kernels
    take no strided inputs yet."""
    need(x.is_contiguous(), "transpose.transpose", "of a strided input (row stride != N)")
    return ops().transpose_2d(x)


__all__ = ["transpose", "batched_transpose"]
