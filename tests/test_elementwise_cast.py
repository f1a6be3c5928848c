"""`elementwise_cast` (TileKernels 2.1.0's `cast`, its round-to-nearest-even mode): every dtype pair of fp32,
bf16 and e4m3, the CPU kernel against torch's own conversions (saturating to ±448 into e4m3, as TileKernels'
test does: `clamp(±448).to(dtype)`), bit for bit, on every bf16 and e4m3 code, on random float32 bit patterns
and on the edges of each format; and the sizes of TileKernels' test (a block tail of 256, 128, 32, 4 or 1)."""
import pytest
import torch

import tkgen.ops as ops
from tkgen.testing.check import compare

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}


def oracle(x, dtype):
    """torch's conversion; into e4m3 through a clamp to ±448 (torch's own gives NaN past 448)."""
    if dtype == torch.float8_e4m3fn:
        return x.float().clamp(-448.0, 448.0).to(dtype)
    return x.to(dtype)


def f32(bits):
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


# float32 inputs at the edges of each output format, as bit patterns
EDGES = [
    0x00000000, 0x80000000,                         # ±0
    0x7F800000, 0xFF800000,                         # ±inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, # NaNs: quiet, signed, signalling, payloads
    0x7F7FFFFF, 0xFF7FFFFF,                         # ±FLT_MAX
    0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7EFFFF, # around the largest bf16 (0x7F7F) and its tie to inf
    0x00800000, 0x00000001, 0x807FFFFF, 0x00400000, # float32's smallest normal and subnormals
    0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, # bf16 ties at 1 + 2^-8 (down, even) and 1 + 3 * 2^-8 (up)
    0x00010000, 0x00008000, 0x00018000, 0x00004000, # bf16 subnormals, their ties, below the smallest
]
E4M3_EDGES = [448.0, -448.0, 449.0, 463.99, 464.0, 464.01, 479.0, 480.0, 481.0, 1e30, -1e30, 240.0, 232.0,
              248.0, 2.0 ** -9, 2.0 ** -10, -(2.0 ** -10), 1.5 * 2.0 ** -10, 2.0 ** -11, 3 * 2.0 ** -10,
              2.0 ** -6, 2.0 ** -6 - 2.0 ** -10, 7 * 2.0 ** -9, 1.0625, 1.1875, -1.0625, 3.4e38]


def edge_inputs():
    x = torch.cat([f32(EDGES), torch.tensor(E4M3_EDGES, dtype=torch.float32)])
    g = torch.Generator().manual_seed(16)
    bits = torch.randint(-2 ** 31, 2 ** 31, (1 << 16,), generator=g, dtype=torch.int64).to(torch.int32)
    return torch.cat([x, bits.view(torch.float32)])


def inputs_of(src):
    """Every code of bf16 and e4m3; float32 edges and random bit patterns."""
    if src == "fp32":
        return edge_inputs()
    if src == "bf16":
        return torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)


@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_every_pair_bit_for_bit(src, dst):
    x = inputs_of(src)
    y = ops.elementwise_cast(x, DTYPES[dst])
    assert y.dtype == DTYPES[dst] and y.shape == x.shape
    compare("y", y, oracle(x, DTYPES[dst]), "bit")
    assert torch.equal(ops.elementwise_cast(x, dst).view(torch.uint8), y.view(torch.uint8))      # tkgen's name works too


def test_saturation_signed_zeros_and_nan():
    x = torch.tensor([1e6, -1e6, float("inf"), float("-inf"), 464.0, -0.0, 0.0, 2.0 ** -11, -(2.0 ** -11),
                      float("nan")])
    y = ops.elementwise_cast(x, torch.float8_e4m3fn).view(torch.uint8).tolist()
    assert y[:5] == [0x7E, 0xFE, 0x7E, 0xFE, 0x7E]             # ±448, never NaN (0x7F) for finite or inf
    assert y[5:9] == [0x80, 0x00, 0x00, 0x80]                  # the sign of zero survives, also underflowing
    assert y[9] & 0x7F == 0x7F                                 # NaN stays NaN
    b = ops.elementwise_cast(f32([0x7F7F8000, 0x7F800001, 0x80000000]), torch.bfloat16).view(torch.int16).tolist()
    assert b[0] == 0x7F80 and (b[1] & 0x7F80) == 0x7F80 and b[1] & 0x7F and b[2] == -0x8000


@pytest.mark.parametrize("tail", [0, 256, 128, 32, 4, 1])
def test_sizes_with_a_tail(tail):
    """TileKernels' sizes T x H + offset, made small: every block of 1024 elements, the last one partial."""
    n = 3 * 1024 + tail
    x = torch.randn(n, generator=torch.Generator().manual_seed(tail)) * 300
    for dst in ("e4m3", "bf16"):
        compare("y", ops.elementwise_cast(x, dst), oracle(x, DTYPES[dst]), "bit")
    assert ops.elementwise_cast(x[:0], "bf16").shape == (0,)


def test_arguments_are_checked():
    x = torch.randn(8)
    with pytest.raises(ValueError, match="`dtype` must be one of"):
        ops.elementwise_cast(x, torch.float16)
    with pytest.raises(TypeError, match="dtype"):
        ops.elementwise_cast(x.double(), "bf16")
    with pytest.raises(ValueError, match="rank 1"):
        ops.elementwise_cast(x.reshape(2, 4), "bf16")
