"""How outputs are compared to the reference (`exact` declarations, docs/numerics.md)."""
import pytest
import torch

from tkgen.testing.check import compare


def _bf16(*codes):
    return torch.tensor(codes, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def test_bit_lets_nan_meet_any_nan_and_nothing_else():
    want = _bf16(0x3F80, 0x7FC0, 0x8000)                  # 1.0, +NaN, -0.0
    compare("y", _bf16(0x3F80, 0xFFFF, 0x8000), want, "bit")   # CUDA's NaN for x86's
    for got in (_bf16(0x3F81, 0x7FC0, 0x8000), _bf16(0x3F80, 0x7F80, 0x8000), _bf16(0x3F80, 0x7FC0, 0x0000)):
        with pytest.raises(AssertionError, match="bit-exact"):
            compare("y", got, want, "bit")            # an ulp, inf for NaN, +0 for -0


def test_bytes_holds_nan_payloads():
    want = _bf16(0x7FC1)
    compare("y", _bf16(0x7FC1), want, "bytes")
    with pytest.raises(AssertionError, match="bit-exact"):
        compare("y", _bf16(0x7FC0), want, "bytes")


def test_integer_codes_have_no_nan_exemption():
    want = torch.tensor([0x7F, 0xFF], dtype=torch.uint8)
    with pytest.raises(AssertionError):
        compare("q", torch.tensor([0xFF, 0xFF], dtype=torch.uint8), want, "bit")
