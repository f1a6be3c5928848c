"""A user adds an operator by writing one spec: it validates, generates and fuzzes with no other code."""
import shutil
import subprocess
import sys

from tkgen import registry

SPEC = """\
op: row_extremes
family: demo
doc: Per row, the largest magnitude and the smallest value.
dims:
  T: {dynamic: true, doc: rows}
  H: {doc: columns, min: 1, max: 4096, test_values: [1, 3, 64, 100]}
axes:
  t: T
  c: H
inputs:
  x: {dtypes: [fp32, bf16], shape: [T, H], view: [t, c]}
outputs:
  hi: {dtype: fp32, shape: [T], view: [t], exact: bit}
  lo: {dtype: fp32, shape: [T], view: [t], exact: bit}
compute:
  - xf = load(x)
  - hi = absmax(xf, c)
  - lo = amin(xf, c)
tests:
  max_rows: 12
"""


def run(*args):
    return subprocess.run([sys.executable, "-m", "tkgen.tools.cli", *args], capture_output=True, text=True)


def test_a_new_spec_end_to_end(tmp_path):
    specs = tmp_path / "specs"
    shutil.copytree(registry.specs_dir() / "formats", specs / "formats")
    shutil.copytree(registry.specs_dir() / "archs", specs / "archs")
    (specs / "demo").mkdir()
    (specs / "demo" / "row_extremes.yaml").write_text(SPEC)
    out = tmp_path / "generated"
    assert run("--specs", str(specs), "validate", str(specs)).returncode == 0
    r = run("--specs", str(specs), "generate", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "demo" / "row_extremes" / "kernel_cuda.py").exists()
    assert (out / "demo" / "row_extremes" / "knobs_sm90.py").exists()
    # outputs computed by reductions are written (their tiles must not shadow the output tensors)
    r = run("--specs", str(specs), "fuzz", "row_extremes", "--examples", "12", "--seed", "3", "--generated", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
