"""Storage of outputs in a column-major layout: allocation of the strided view, and the buffer a kernel
writes (see `Layout` in tkgen/spec/formats.py)."""
import torch


def col_major_empty(shape, pad: int, dtype, device) -> torch.Tensor:
    """An uninitialised [rows, cols] view of a [cols, rows rounded up to `pad`] buffer: strides (1, rows')."""
    rows, cols = shape
    padded = -(-rows // pad) * pad
    return torch.empty((cols, padded), dtype=dtype, device=device)[:, :rows].T


def col_major(t: torch.Tensor) -> torch.Tensor:
    """A copy of the [rows, cols] tensor `t` in TileKernels' TMA-aligned column-major layout: a view of a
    [cols, rows padded to 16 bytes] buffer."""
    return col_major_empty(tuple(t.shape), 16 // t.element_size(), t.dtype, t.device).copy_(t)


def col_major_storage(view: torch.Tensor, pad: int) -> torch.Tensor:
    """The whole [cols, rows'] buffer behind a column-major view, as the kernel declares it."""
    rows, cols = view.shape
    padded = -(-rows // pad) * pad
    if view.numel() and (view.stride(0) != 1 or (cols > 1 and view.stride(1) != padded)):
        raise ValueError(f"a column-major output must have strides (1, {padded}), got {tuple(view.stride())}")
    return torch.as_strided(view, (cols, padded), (padded, 1))
