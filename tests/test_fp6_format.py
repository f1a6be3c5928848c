"""Adding a number format is a data file: FP6 E3M2 (docs/numerics.md) added in a scratch spec tree,
generated, and the resulting per_token_cast (its CPU kernel) checked against ml_dtypes' float6_e3m2fn."""
import shutil
import subprocess
import sys

from tkgen import registry

E3M2 = """\
format: e3m2
kind: element
doc: FP6 E3M2 (OCP MX), one code per byte. No infinities or NaN; the largest magnitude is 28.
exponent_bits: 3
mantissa_bits: 2
bias: 3
specials: finite
rounding: nearest_even
overflow: saturate
min_amax: 1.0e-4
container: {torch: uint8, storage: uint8}
"""

CHECK = """\
import ml_dtypes, numpy as np, torch
import tkgen.ops as ops
g = torch.Generator().manual_seed(11)
x = torch.randn(13, 256, generator=g) * torch.exp2(torch.randint(-12, 12, (13, 256), generator=g).float())
x[3] = 0.0
q, sf = ops.per_token_cast(x, fmt="e3m2", group=32, scale="fp32")
assert q.dtype == torch.uint8 and q.shape == (13, 256)
xf = x.reshape(13, 8, 32)
amax = xf.abs().amax(-1).clamp(min=torch.tensor(1e-4).item())
inv = torch.full_like(amax, 28.0) / amax
want = (xf * inv[..., None]).reshape(13, 256).clamp(-28, 28).numpy().astype(ml_dtypes.float6_e3m2fn)
assert np.array_equal(q.numpy(), want.view(np.uint8)), (q.numpy()[:2, :8], want.view(np.uint8)[:2, :8])
assert torch.equal(sf, amax / 28.0)
print("e3m2 ok")
"""


def test_fp6_e3m2_as_a_data_file(tmp_path):
    specs = tmp_path / "specs"
    shutil.copytree(registry.specs_dir(), specs)
    (specs / "formats" / "element" / "e3m2.yaml").write_text(E3M2)
    op = specs / "quant" / "per_token_cast.yaml"
    text = op.read_text()
    assert "one_of: [e4m3, e5m2, e2m1, e5m6]" in text
    op.write_text(text.replace("one_of: [e4m3, e5m2, e2m1, e5m6]", "one_of: [e4m3, e5m2, e2m1, e5m6, e3m2]", 1))
    for other in ("cast_back", "per_token_cast_and_cast_back", "per_token_cast_with_sf_only",
                  "per_token_cast_with_precomputed_sf"):
        (specs / "quant" / f"{other}.yaml").unlink()
    out = tmp_path / "generated"
    r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "--specs", str(specs), "generate", "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "def encode_e3m2" in (out / "common" / "tilelang_helpers.py").read_text()
    env = {**__import__("os").environ, "TKGEN_GENERATED": str(out), "TKGEN_SPECS": str(specs)}
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env,
                       cwd=str(registry.REPO))
    assert r.returncode == 0 and "e3m2 ok" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
