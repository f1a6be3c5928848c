"""Tolerances for sums that cancel (issue 26, item 6): `atol_of: terms` makes `atol` relative to the
largest term of the sum (the product of the largest |value| of each input `terms` names), not to the
output, which a cancelling sum makes small (docs/spec-language.md: "Sums that cancel")."""
import pytest
import torch

from spec_trees import generated_tree, only_error as _check, run
from tkgen.testing.check import compare, largest_term

TERMS = {"tol": {"rtol": 0.0, "atol": 1.0e-6, "atol_of": "terms", "terms": ["x"]}}

SPEC = """\
op: centred_sum
family: demo
doc: Per row, the mean of x's deviations from the row's mean, zero but for rounding; a sum that cancels.
dims:
  T: {dynamic: true, doc: rows}
  H: {doc: channels, min: 1, max: 4096, test_values: [7, 64]}
axes: {t: T, h: H}
inputs:
  x: {dtypes: [fp32, bf16], shape: [T, H], view: [t, h]}
outputs:
  c: {dtype: fp32, shape: [T], view: [t], exact: {tol: {rtol: 0.0, atol: 1.0e-5, atol_of: terms, terms: [x]}}}
compute:
  - xf = load(x)
  - mu = fold(sum, xf, h, 0.0) / H
  - d = xf - mu
  - c = sum(d, h) / H
tests:
  max_rows: 12
"""


def test_the_bound_is_relative_to_the_terms_and_not_vacuous():
    """Terms near 1e4 that cancel to about 1e-3: the bound is atol * 1e4 = 1e-2, whatever the output."""
    x = torch.full((4, 8), 1.0e4)
    x[:, 1] = -1.0e4
    terms = largest_term({"x": x}, TERMS)
    assert terms == 1.0e4
    want = torch.full((4,), 1.0e-3)
    compare("c", want + 5.0e-3, want, TERMS, terms)            # within atol * terms
    with pytest.raises(AssertionError, match="output c"):
        compare("c", want + 2.0e-2, want, TERMS, terms)         # twice the bound: caught
    with pytest.raises(AssertionError):                        # relative to the output, the same error fails
        compare("c", want + 5.0e-3, want, {"tol": {"rtol": 0.0, "atol": 1.0e-6, "atol_of": "max"}})
    with pytest.raises(ValueError, match="largest term"):
        compare("c", want, want, TERMS)                        # the bound needs the terms


def test_the_largest_term_of_a_product_of_inputs():
    a, b = torch.tensor([1.0, -3.0, float("nan")]), torch.tensor([[2.0, float("inf")], [-0.5, 0.0]])
    tol = {"tol": {"rtol": 0.0, "atol": 1.0, "atol_of": "terms", "terms": ["a", "b"]}}
    assert largest_term({"a": a, "b": b}, tol) == 6.0          # NaN and inf are left out
    assert largest_term({"a": a, "b": None}, tol) == 3.0       # an absent input counts as 1
    assert largest_term({"a": a}, {"tol": {"rtol": 0.0, "atol": 1.0}}) is None




def test_terms_are_validated(tmp_path):
    e = _check(tmp_path, SPEC.replace(", terms: [x]", ""))
    assert e.field_path == ("outputs", "c", "exact", "tol") and "terms" in e.message, e
    e = _check(tmp_path, SPEC.replace("atol_of: terms, ", ""))
    assert e.field_path == ("outputs", "c", "exact", "tol") and "go together" in e.message, e
    e = _check(tmp_path, SPEC.replace("terms: [x]", "terms: [xx]"))
    assert e.field_path == ("outputs", "c", "exact", "tol", "terms", 0) and "did you mean x?" in e.message, e


CALL = """
import sys, torch
from tkgen import registry
registry.use_generated(sys.argv[1])
from tkgen.testing.check import check_tensors, largest_term
g = torch.Generator().manual_seed(0)
x = 1000.0 + torch.randn(12, 64, generator=g)      # deviations of about 1 from a mean of 1000: they cancel
outs, refs = check_tensors("centred_sum", {"x": x}, {})
print(float(refs[0].abs().max()), largest_term({"x": x}, {"tol": {"atol_of": "terms", "terms": ["x"]}}))
"""


def test_a_sum_that_cancels_passes_with_a_bound_relative_to_its_terms(tmp_path):
    _, out = generated_tree(tmp_path, {"centred_sum": SPEC})
    r = run("-c", CALL, str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result, terms = map(float, r.stdout.split())
    assert result < 1e-3 * terms        # the output is far below its terms: `atol_of: max` would not cover it
