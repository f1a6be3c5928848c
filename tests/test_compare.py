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


def test_an_unwritten_element_fails_even_where_the_reference_is_nan(monkeypatch):
    """The poison is NaN, and a NaN meets any NaN; so where the reference gives NaN, run_case runs the kernel
    again over zeros. A kernel that skips such an element is caught."""
    from tkgen.testing import check as C
    codec = {"kind": "element", "name": "e4m3", "container": "float8_e4m3fn", "packet": (1, 1), "pack": None,
             "store": "codes"}
    recipe = {"dtype": "fp32", "seed": 1, "scale_exp": 0, "style": "normal", "specials": []}
    case = {"dims": {"T": 2, "H": 32}, "params": {"fmt": "e4m3", "block": 32, "scale": "fp32", "out": "fp32"},
            "shapes": {"q": [2, 32], "sf": [2, 1]},
            "inputs": {"q": {**recipe, "specials": [["nan", 0, 0, 1]], "codec": codec, "logical": [2, 32]},
                       "sf": recipe}}
    C.run_case("cast_back", case)            # a NaN code at [0, 0]: the reference's y[0, 0] is NaN
    real_run = C.run

    def skips_first_element(op, tensors, params, arch=None, out=None, **kw):
        before = out[0].clone()
        res = real_run(op, tensors, params, arch=arch, out=out, **kw)
        res[0].view(-1)[0] = before.view(-1)[0]
        return res
    monkeypatch.setattr(C, "run", skips_first_element)
    with pytest.raises(AssertionError, match="bit-exact"):
        C.run_case("cast_back", case)


def test_max_type_reductions_skip_nan_in_kernel_and_reference():
    """A NaN first, last or everywhere in a group: the scale is the absmax of the other elements (the
    1e-4 floor where all are NaN) in the CPU kernel and in the reference, and the NaN element gets the NaN
    code (docs/numerics.md, max-type reductions)."""
    from tkgen import registry
    from tkgen.runtime.fastpath import run
    from tkgen.testing.check import reference_outputs
    pkg = registry.op_package("per_token_cast")
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(2))
    x[0, 0], x[0, 127], x[1, 63], x[1, 64], x[2] = float("nan"), float("nan"), float("nan"), -float("nan"), float("nan")
    for group in (128, 32):
        p = {"fmt": "e4m3", "group": group, "scale": "fp32", "sf_layout": "row"}
        got, want = run(pkg.OP, {"x": x}, p), reference_outputs(pkg.OP, pkg, {"x": x}, p)
        for name, g, w in zip(("q", "sf"), got, want):
            compare(name, g, w, "bit")
        amax = torch.where(torch.isnan(x), 0.0, x.abs()).reshape(3, -1, group).amax(-1).clamp(min=1e-4)
        assert torch.equal(want[1], amax / 448)
        assert bool(torch.isnan(want[0].float()[torch.isnan(x)]).all())


def test_rows_left_untouched_must_still_hold_the_poison_and_counts_must_be_added():
    """keep_rows: a kernel that writes a padding row, or overwrites a count instead of adding to it, fails."""
    from tkgen import registry
    from tkgen.runtime.fastpath import run
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
