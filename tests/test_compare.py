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


def test_rows_left_untouched_must_still_hold_the_poison_and_counts_must_be_added():
    """keep_rows: a kernel that writes a padding row, or overwrites a count instead of adding to it, fails."""
    from tkgen import registry
    from tkgen.runtime.ops import run
    from tkgen.testing.check import compare_outputs, poisoned, reference_outputs

    pkg = registry.op_package("swiglu_forward")
    gen = torch.Generator().manual_seed(0)
    tensors = {"x": torch.randn(6, 128, generator=gen),
               "pos_to_expert": torch.tensor([0, -1, 2, 1, -1, 3], dtype=torch.int32)}
    params = {"fmt": "fp32", "clamp": 0.5}
    out = poisoned(pkg.OP, tensors, params)
    before = [o.clone() for o in out]
    outs = run(pkg.OP, tensors, params, out=out)
    refs = reference_outputs(pkg.OP, pkg, tensors, params)
    compare_outputs(pkg.OP, pkg, tensors, params, outs, refs, before)
    wrote = [outs[0].clone(), outs[1]]
    wrote[0][4] = refs[0][4]             # what an unguarded kernel would store there
    with pytest.raises(AssertionError, match="rows not kept"):
        compare_outputs(pkg.OP, pkg, tensors, params, wrote, refs, before)
    with pytest.raises(AssertionError, match="clamped_count"):
        compare_outputs(pkg.OP, pkg, tensors, params, [outs[0], refs[1]], refs, before)
