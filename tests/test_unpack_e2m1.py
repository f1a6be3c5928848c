"""`unpack_from_e2m1fn_x2`: every byte, both nibbles, decoded against ml_dtypes' FP4 table, bit for bit."""
import ml_dtypes
import numpy as np
import pytest
import torch

import tkgen.ops as ops


def oracle(q, dtype):
    b = q.view(torch.uint8).to(torch.int64)
    c = torch.stack([b & 0xF, b >> 4], -1).reshape(q.shape[0], 2 * q.shape[1])
    v = torch.from_numpy(c.numpy().astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32))
    return v.to(dtype)


@pytest.mark.parametrize("out", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                                 torch.float8_e5m2])
def test_every_byte(out):
    q = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8).reshape(4, 64)
    y = ops.unpack_from_e2m1fn_x2(q, out)
    assert y.shape == (4, 128) and y.dtype == out
    assert torch.equal(y.view(torch.uint8), oracle(q, out).view(torch.uint8))     # -0.0 (0x8) included
    assert torch.equal(y[0, :4], torch.tensor([0.0, 0.0, 0.5, 0.0], dtype=out))   # bytes 0x00, 0x01: low first


def test_checks_the_container():
    with pytest.raises(TypeError, match="int8"):
        ops.unpack_from_e2m1fn_x2(torch.zeros(2, 4, dtype=torch.uint8))
