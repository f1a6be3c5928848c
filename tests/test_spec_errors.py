"""A bad spec names its file, line and column, the field path, and what was expected."""
import subprocess
import sys

import pytest

from spec_trees import only_error as _check
from tkgen import registry
from tkgen.driver import validate_files

GOOD = (registry.specs_dir() / "quant" / "per_token_cast.yaml").read_text()




def _spec_groups(per_group=8):
    """The shipped spec files in groups of a few (validating one lowers every variant on every profile and
    verifies the IR after every pass: the groups run in parallel, each well within a minute)."""
    paths = sorted(registry.specs_dir().rglob("*.yaml"))
    return [paths[i:i + per_group] for i in range(0, len(paths), per_group)]


def test_the_spec_groups_cover_every_shipped_spec():
    assert sorted(p for g in _spec_groups() for p in g) == sorted(registry.specs_dir().rglob("*.yaml"))


@pytest.mark.parametrize("paths", _spec_groups(), ids=lambda g: f"{g[0].stem}..{g[-1].stem}")
def test_the_shipped_specs_are_valid(paths):
    assert validate_files(paths, registry.specs_dir()) == []


def test_schema_error_points_at_the_field(tmp_path):
    e = _check(tmp_path, GOOD.replace("dtypes: [bf16, fp32]", "dtypes: 7"))
    line = next(i for i, l in enumerate(GOOD.splitlines(), 1) if "dtypes: [bf16, fp32]" in l)
    assert e.line == line and e.field_path[:3] == ("inputs", "x", "dtypes")
    assert "expected" in e.message and str(e).startswith(str(tmp_path / "op.yaml"))


def test_unknown_field(tmp_path):
    e = _check(tmp_path, GOOD.replace("family: quant", "family: quant\ncolour: blue"))
    assert "unknown field" in e.message and "colour" in e.message


def test_bad_expression_column(tmp_path):
    e = _check(tmp_path, GOOD.replace("g: H / group", "g: H / / group"))
    assert e.field_path == ("axes", "g") and e.col > 1 and "unexpected" in e.message


def test_unknown_name_in_shape(tmp_path):
    e = _check(tmp_path, GOOD.replace("shape: [T, H / group]", "shape: [T, H / grp]"))
    assert e.field_path == ("outputs", "sf", "shape", 1) and "grp" in e.message


def test_unknown_format(tmp_path):
    e = _check(tmp_path, GOOD.replace("one_of: [e4m3, e5m2, e2m1, e5m6]", "one_of: [e4m3, e9m9]"))
    assert "e9m9" in e.message and e.field_path[:2] == ("outputs", "q")


def test_stage_errors_point_at_the_stage(tmp_path):
    assert GOOD.count("amax = max(absmax(xf, c), ") == 1
    e = _check(tmp_path, GOOD.replace("amax = max(absmax(xf, c), ", "amax = max(absmax(xf, z), "))
    assert e.field_path == ("compute", 1) and "axis" in e.message
    e = _check(tmp_path, GOOD.replace("q = xf * inv", "q = xf * nope"))
    assert e.field_path == ("compute", 3) and "nope" in e.message
    e = _check(tmp_path, GOOD.replace("q = xf * inv", "q = system(xf)"))
    assert "unknown function" in e.message


def test_output_axes_must_match_the_view(tmp_path):
    e = _check(tmp_path, GOOD.replace("q = xf * inv", "q = inv"))
    assert "varies over" in e.message


def test_duplicate_key(tmp_path):
    e = _check(tmp_path, GOOD.replace("family: quant", "family: quant\nfamily: moe"))
    assert "duplicate" in e.message


def test_cli_validate_exit_code(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(GOOD.replace("view: [t, g]", "view: [t, q]"))
    r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "validate", str(p)], capture_output=True, text=True)
    assert r.returncode == 1 and f"{p}:" in r.stderr and "unknown axis" in r.stderr
    # a valid file: exit 0 (test_the_shipped_specs_are_valid validates the whole tree)
    r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "validate",
                        str(registry.specs_dir() / "moe" / "topk_gate.yaml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


BLOCKS = (registry.specs_dir() / "quant" / "per_channel_cast.yaml").read_text()
MOVE = (registry.specs_dir() / "transpose" / "batched_transpose.yaml").read_text()


def test_row_blocks_need_their_inner_axis(tmp_path):
    e = _check(tmp_path, BLOCKS.replace("r: group_tokens", "r: 64"))
    assert e.field_path == ("axes", "b") and "rows inside a block" in e.message
    e = _check(tmp_path, BLOCKS.replace("view: [[b, r], h],\n      values", "view: [[r, b], h],\n      values"))
    assert e.field_path == ("inputs", "x", "view", 0) and "[b, r]" in e.message


def test_layout_params_must_be_boolean(tmp_path):
    e = _check(tmp_path, BLOCKS.replace("when: {transpose:", "when: {scale:"))
    assert e.field_path == ("outputs", "q", "when", "scale") and "boolean" in e.message
    e = _check(tmp_path, BLOCKS.replace("view: [h, [b, r]]}", "view: [h, b]}"))   # checked like any view
    assert e.field_path[:4] == ("outputs", "q", "when", "transpose") and "[b, r]" in e.message


def test_copies_go_to_like_outputs(tmp_path):
    e = _check(tmp_path, MOVE.replace("out: {like: x,", "out: {dtype: bf16,"))
    assert e.field_path[0] == "compute" and "like: x" in e.message
    e = _check(tmp_path, MOVE.replace("out = copy(x)", "out = copy(x) * 2.0"))
    assert "copied elements" in e.message


def test_when_names_an_optional_input_or_a_boolean_param(tmp_path):
    e = _check(tmp_path, GOOD.replace("sf: {scale_format: scale,", "sf: {scale_format: scale, when: scale,"))
    assert e.field_path == ("outputs", "sf", "when") and "boolean param" in e.message


def test_optional_float_params_need_an_absent_value(tmp_path):
    text = GOOD.replace("params:\n", "params:\n  c: {type: float, optional: true, test_values: [0.5], doc: a clamp}\n")
    e = _check(tmp_path, text)
    assert e.field_path == ("params", "c") and "absent" in e.message
    e = _check(tmp_path, GOOD.replace("default: 128, doc:", "default: 128, absent: 1, doc:"))
    assert e.field_path == ("params", "group", "absent") and "float" in e.message


def test_packed_codes_fit_in_a_word(tmp_path):
    """Two 12-bit codes fill three bytes exactly, but a code would span three words: rejected."""
    e5m6 = (registry.specs_dir() / "formats" / "element" / "e5m6.yaml").read_text()
    old = "pack: {codes: 8, words: 3, word: int32, order: msb_first}"
    assert old in e5m6
    e = _check(tmp_path, e5m6.replace(old, "pack: {codes: 2, words: 3, word: uint8, order: msb_first}"))
    assert "codes of 12 bits are wider than a uint8 word" in str(e), e


SWIGLU = (registry.specs_dir() / "fused" / "swiglu_forward.yaml").read_text()


def test_errors_of_the_row_features(tmp_path):
    """keep_rows first, counts over the rows, `at:` positions in an integer input, runtime sizes only for
    tensors addressed at positions, one of view and at."""
    first = "  - keep = keep_rows(load(pos_to_expert) >= 0 and load(pos_to_token_topk) >= 0)\n"
    e = _check(tmp_path, SWIGLU.replace(first, "").replace("  - xf = load(x)\n", "  - xf = load(x)\n" + first))
    assert "first statement" in e.message
    e = _check(tmp_path, SWIGLU.replace("count(b0 < -clamp)", "count(load(weights) > 0)"))
    assert "vary over the rows" in e.message
    e = _check(tmp_path, SWIGLU.replace("at: pos_to_token_topk", "at: weights"))
    assert e.field_path == ("inputs", "topk_weights", "at") and "integer" in e.message
    e = _check(tmp_path, SWIGLU.replace("shape: [T], view: [t], optional: true, absent: 1.0", "shape: [T_tok], view: [t], optional: true, absent: 1.0"))
    assert "runtime size besides the rows" in e.message
    # `at` with a view addresses whole rows: the view names the dims after the first, not the positions' axes
    e = _check(tmp_path, SWIGLU.replace("at: pos_to_token_topk,", "at: pos_to_token_topk, view: [t],"))
    assert "the view names axes of the positions" in e.message


# -- messages in the user's language (issue 26, item 4) ------------------------------------------------
LAYERNORM = """\
op: layer_norm
family: demo
doc: LayerNorm over the channels.
params:
  eps: {type: float, default: 1.0e-5, doc: added to the variance}
  mode: {one_of: [plain, fancy], default: plain, doc: a string param}
dims:
  T: {dynamic: true, doc: rows}
  H: {doc: channels, min: 1, max: 4096, test_values: [7, 64]}
axes: {t: T, h: H}
inputs:
  x: {dtypes: [fp32, bf16], shape: [T, H], view: [t, h]}
  weight: {like: x, shape: [H], view: [h], optional: true, absent: 1.0}
outputs:
  y: {dtype: fp32, shape: [T, H], view: [t, h]}
compute:
  - xf = load(x)
  - mu = fold(sum, xf, h, 0.0) / H
  - d = xf - mu
  - d2 = d * d
  - rstd = rsqrt(fold(sum, d2, h, 0.0) / H + eps)
  - y = d * rstd * load(weight)
"""


def test_the_layer_norm_of_these_tests_is_valid(tmp_path):
    p = tmp_path / "op.yaml"
    p.write_text(LAYERNORM)
    assert validate_files([p], registry.specs_dir()) == []


def test_errors_never_name_the_builders_temporaries(tmp_path):
    e = _check(tmp_path, LAYERNORM.replace("d * rstd * load", "d * rstdd * load"))
    assert "_t" not in e.message and "rstdd" in e.message and "did you mean rstd?" in e.message, e
    # a stage call inside an expression is a temporary of the builder: the message shows the call instead
    text = LAYERNORM.replace("outputs:\n", "outputs:\n  s: {dtype: fp32, shape: [H], view: [h], "
                                           "exact: {tol: {rtol: 1.0e-5, atol: 0.0}}}\n") + "  - s = sum(xf, t) * 2.0\n"
    e = _check(tmp_path, text)
    assert e.field_path == ("compute", 6) and "'sum(xf, t)' is reduced over the rows" in e.message, e
    assert "_t" not in e.message


def test_did_you_mean_for_dims_axes_params_and_inputs(tmp_path):
    e = _check(tmp_path, LAYERNORM.replace("/ H + eps", "/ HH + eps"))          # a dim
    assert e.field_path == ("compute", 4) and "did you mean H?" in e.message, e
    e = _check(tmp_path, LAYERNORM.replace("d2, h, 0.0", "d2, hh, 0.0"))    # an axis
    assert "found 'hh'; did you mean h?" in e.message, e
    e = _check(tmp_path, LAYERNORM.replace("+ eps)", "+ epss)"))                  # a param
    assert "unknown value 'epss'; did you mean eps?" in e.message, e
    e = _check(tmp_path, LAYERNORM.replace("load(weight)", "load(weigth)"))       # an input
    assert "found 'weigth'; did you mean weight?" in e.message, e
    e = _check(tmp_path, LAYERNORM.replace("view: [t, h]}\n  weight", "view: [t, hx]}\n  weight"))   # a view's axis
    assert e.field_path == ("inputs", "x", "view", 1) and "did you mean h?" in e.message, e
    e = _check(tmp_path, LAYERNORM.replace("shape: [H], view: [h]", "shape: [HH], view: [h]"))        # a shape's dim
    assert e.field_path == ("inputs", "weight", "shape", 0) and "did you mean H?" in e.message, e
    e = _check(tmp_path, LAYERNORM.replace("- y = d * rstd * load(weight)", "- y = d * rstd * weight"))
    assert "'weight' is an input tensor: read it with load(weight)" in e.message, e


def test_a_shape_offers_only_names_that_may_appear_in_a_shape(tmp_path):
    e = _check(tmp_path, LAYERNORM.replace("shape: [H], view: [h]", "shape: [mod], view: [h]"))
    assert e.field_path == ("inputs", "weight", "shape", 0) and "(expected one of H, T)" in e.message, e
    assert "mode" not in e.message and "eps" not in e.message


def test_an_integer_output_given_a_float_is_reported_at_the_output(tmp_path):
    e = _check(tmp_path, LAYERNORM.replace("y: {dtype: fp32,", "y: {dtype: int32,"))
    line = next(i for i, l in enumerate(LAYERNORM.splitlines(), 1) if l.startswith("  y: {dtype"))
    assert e.line == line and e.field_path == ("outputs", "y", "dtype"), e
    assert "integer output holds integer values" in e.message and "y = d * rstd * load(weight)" in e.message


def test_validate_file_reports_that_file_not_another_one(tmp_path):
    """In a specs directory with two broken operators, validating one reports its own error."""
    import shutil
    specs = tmp_path / "specs"
    shutil.copytree(registry.specs_dir() / "formats", specs / "formats")
    shutil.copytree(registry.specs_dir() / "archs", specs / "archs")
    (specs / "demo").mkdir()
    (specs / "demo" / "a.yaml").write_text(LAYERNORM.replace("d2, h, 0.0", "d2, hh, 0.0"))
    (specs / "demo" / "b.yaml").write_text(LAYERNORM.replace("op: layer_norm", "op: layer_norm_b")
                                           .replace("+ eps)", "+ epss)"))
    errors = validate_files([specs / "demo" / "b.yaml"], specs)
    assert len(errors) == 1 and errors[0].path == specs / "demo" / "b.yaml" and "epss" in errors[0].message, errors
    r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "--specs", str(specs), "validate",
                        str(specs / "demo" / "b.yaml")], capture_output=True, text=True)
    assert r.returncode == 1 and "b.yaml" in r.stderr and "a.yaml" not in r.stderr, r.stderr


def test_did_you_mean_in_workloads_and_schedules(tmp_path):
    e = _check(tmp_path, GOOD.replace("{T: 4001, H: 2560}", "{T: 4001, HH: 2560}"))
    assert e.field_path == ("workloads", 1, "dims", "HH") and "unknown dim 'HH'; did you mean H?" in e.message, e
    e = _check(tmp_path, GOOD.replace("H: 2560}, params: {group: 128}", "H: 2560}, params: {grop: 128}"))
    assert "unknown param 'grop'; did you mean group?" in e.message, e
    e = _check(tmp_path, GOOD.replace("H: 2560}, params: {group: 128}, dtypes: {x: bf16}",
                                      "H: 2560}, params: {group: 128}, dtypes: {xx: bf16}"))
    assert "unknown input 'xx'; did you mean x?" in e.message, e
    e = _check(tmp_path, GOOD.replace("cpu: {block: {t: 1, g: all}}", "cpu: {block: {t: 1, gg: all}}"))
    assert e.field_path == ("schedule", "cpu", "block", "gg") and "did you mean g?" in e.message, e


CAPACITY = (registry.specs_dir() / "moe" / "moe_capacity_mask.yaml").read_text()


def test_a_runtime_param_is_a_value_only(tmp_path):
    """`runtime: true` makes an integer param a kernel argument: it may not size, extend or constrain what
    the factory decides (a shape, an axis extent, a requirement, a size statement), nor be a one_of or a float."""
    e = _check(tmp_path, CAPACITY.replace("axes: {t: T, k: K, j: K, e: num_experts}",
                                          "axes: {t: T, k: K, j: K, e: num_experts, x: capacity}"))
    assert e.field_path == ("axes", "x") and "'capacity' is a runtime param" in e.message
    e = _check(tmp_path, CAPACITY.replace("shape: [num_experts], view: [e]", "shape: [capacity], view: [e]"))
    assert e.field_path[-2:] == ("shape", 0) and "runtime param" in e.message and "a shape" in e.message
    e = _check(tmp_path, CAPACITY.replace("max: 32, test_values", "max: 32, require: [\"K <= capacity\"], test_values"))
    assert e.field_path[:3] == ("dims", "K", "require") and "runtime param" in e.message
    e = _check(tmp_path, CAPACITY.replace("  - jj = iota(j)", "  - half = capacity // 2\n  - jj = iota(j)"))
    assert "'capacity' is a runtime param" in e.message and "size" in e.message
    e = _check(tmp_path, CAPACITY.replace("num_experts: {range: [1, 1024], doc: experts}",
                                          "num_experts: {one_of: [8, 16], runtime: true, doc: experts}"))
    assert e.field_path == ("params", "num_experts", "runtime") and "integer params with a `range`" in e.message


def test_a_workload_gives_an_input_whose_storage_follows_its_format_as_present(tmp_path):
    """A scale-format input has no dtype to choose: a workload names it `present` (its scale format param decides
    its storage); a dtype there is refused at the field, saying what to write."""
    text = (registry.specs_dir() / "quant" / "per_channel_cast_from_fp8.yaml").read_text()
    assert "sf: present" in text
    e = _check(tmp_path, text.replace("sf: present}}", "sf: fp32}}", 1))
    assert e.field_path[-2:] == ("dtypes", "sf") and "write `sf: present`" in e.message


def test_into_at_positions_needs_the_input_at_the_same_positions(tmp_path):
    """An output stored at flat positions `into` an input: the input is addressed `at:` the same positions."""
    good = (registry.specs_dir() / "quant" / "mega_moe_sf_store.yaml").read_text()
    old = "buffer: {dtype: int32, shape: [N], at: pos,"
    assert old in good
    e = _check(tmp_path, good.replace(old, "other: {dtype: int32, shape: [T, W], view: [t, w]}\n  " + old)
               .replace("at: pos, into: buffer", "at: other, into: buffer"))
    assert e.field_path == ("outputs", "stored", "into") and "same positions" in e.message
