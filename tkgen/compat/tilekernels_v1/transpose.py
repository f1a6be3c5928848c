"""`tile_kernels.transpose` of TileKernels' first release, on tkgen's kernels."""
from .._common import ops


def batched_transpose(x):
    """[B, M, N] -> [B, N, M], contiguous, bit for bit."""
    return ops().batched_transpose(x)


def transpose(x):
    """[M, N] -> [N, M], contiguous, bit for bit. A row-strided x (TileKernels' padded rows) is read in place
    where its row stride is a multiple of 16 bytes and it starts on 16 bytes (the kernel's loads); any other
    view is copied contiguous first."""
    granule = 16 // x.element_size() if x.element_size() else 1
    if x.dim() == 2 and not (x.stride(1) == 1 and x.stride(0) % granule == 0 and x.data_ptr() % 16 == 0):
        x = x.contiguous()
    return ops().transpose_2d(x)


__all__ = ["transpose", "batched_transpose"]
