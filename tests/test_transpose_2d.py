"""`transpose_2d` (the first release's `transpose`): a bit-exact copy into the transposed, contiguous layout,
at TileKernels' test shapes (M a multiple of 64, not of 128), row-strided views read in place, and what it
refuses (a row stride off the kernel's 16-byte loads, N not a multiple of 64)."""
import pytest
import torch

import tkgen.ops as ops


def bits(t):
    return t.contiguous().view(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float32])
def test_transpose_at_tilekernels_shapes(dtype):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(4032, 576, generator=g) * 100).to(dtype)
    out = ops.transpose_2d(x)
    assert out.shape == (576, 4032) and out.is_contiguous() and out.dtype == dtype
    assert torch.equal(bits(out), bits(x.T))


def test_nan_payloads_and_signed_zeros_are_moved_as_they_are():
    raw = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).reshape(512, 128)   # every bf16 code
    x = raw.view(torch.bfloat16)
    assert torch.equal(ops.transpose_2d(x).view(torch.int16), raw.T.contiguous())
    f = torch.tensor([0x7F800001, 0xFFC00123, 0x80000000, 0x7FFFFFFF] * 16, dtype=torch.int64).to(torch.int32)
    x = f.reshape(1, 64).expand(3, 64).contiguous().view(torch.float32)
    assert torch.equal(ops.transpose_2d(x).view(torch.int32), x.view(torch.int32).T.contiguous())


def test_reads_row_strided_views_and_refuses_odd_strides_and_widths():
    x = torch.randn(8, 256)
    assert torch.equal(ops.transpose_2d(x[:, :128]), x[:, :128].T.contiguous())   # TileKernels' case: stride 2N
    with pytest.raises(ValueError, match="contiguous"):
        ops.transpose_2d(torch.randn(8, 130)[:, :128])       # a row stride off the 16-byte loads
    with pytest.raises(ValueError, match="N % 64 == 0"):
        ops.transpose_2d(torch.randn(8, 96))
