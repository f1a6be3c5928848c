"""Tiles bounded by the profile (issue 26, item 3): on the C target tiles live on the stack, and a block's
tiles past it crashed the process (exit 139). The cpu profile's `max_tile_bytes` bounds them: validate
rejects a schedule whose tiles pass it at the sizes the spec names, and the kernel factory raises a
ValueError, before anything is compiled or launched, at larger sizes the spec admits."""
from spec_trees import generated_tree, run, validate_text as _errors
from tkgen import registry

SPEC = """\
op: big_tile
family: demo
doc: Per row, the largest magnitude over n of x[t, n, e], every expert of a row held in one tile.
dims:
  T: {dynamic: true, doc: rows}
  N: {doc: slots, min: 1, max: 8192, test_values: [3, 8]}
  E: {doc: experts, min: 1, max: 1024, test_values: [4, 16]}
axes: {t: T, n: N, e: E}
inputs:
  x: {dtype: fp32, shape: [T, N, E], view: [t, n, e]}
outputs:
  y: {dtype: fp32, shape: [T, E], view: [t, e]}
compute:
  - xf = load(x)
  - y = absmax(xf, n)
schedule:
  cpu: {block: {e: all}}
tests:
  max_rows: 4
"""




def test_the_profile_bounds_the_tiles():
    assert registry.specs_dir().joinpath("archs", "cpu.yaml").read_text().count("max_tile_bytes: 8388608") == 1


def test_a_tile_past_the_bound_at_the_sizes_the_spec_names_is_a_validate_error(tmp_path):
    assert _errors(tmp_path, SPEC) == []
    # 4096 slots x 1024 experts of float32 held whole, a copy for the max and the result: 32 MiB + 4 KiB
    errors = _errors(tmp_path, SPEC.replace("test_values: [3, 8]", "test_values: [3, 4096]")
                     .replace("test_values: [4, 16]", "test_values: [4, 1024]"))
    assert len(errors) == 1, errors
    e = errors[0]
    line = next(i for i, l in enumerate(SPEC.splitlines(), 1) if l.startswith("  cpu: {block"))
    assert e.line == line and e.field_path == ("schedule", "cpu"), e
    assert "33558528 bytes at E = 1024, N = 4096" in e.message and "max_tile_bytes (8388608)" in e.message, e


CALL = """
import sys, torch
from tkgen import registry
registry.use_generated(sys.argv[1])
from tkgen_generated.demo.big_tile import op
x = torch.randn(2, 8, 16)
assert torch.equal(op.big_tile(x), x.abs().amax(1))
try:
    op.big_tile(torch.zeros(1, 8192, 1024))      # 64 MiB of tiles: a ValueError, not a crash
except ValueError as e:
    print("refused:", e)
"""


def test_larger_sizes_the_spec_admits_are_refused_before_the_kernel_runs(tmp_path):
    _, out = generated_tree(tmp_path, {"big_tile": SPEC})
    r = run("-c", CALL, str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "refused:" in r.stdout and "max_tile_bytes" in r.stdout, r.stdout
