"""The library's activation functions (issue 26, item 2): `tanh` and `erf` (library functions of each target),
and `gelu`, `gelu_tanh`, `silu` and `softplus`, expanded into torch's formulas operation for operation.

On the CPU the C kernel and its reference call the same libm (`tanhf`, `erff`, `expf`, `log1pf`), so they agree
bit for bit on every input. Against torch's own functions: the special values agree bit for bit with torch's
elementwise path, `gelu_tanh`'s tail below -5.5 is -0.0 as in torch, and every other value lies within a
few ulp of torch's vectorised CPU kernels (whose erf and tanh are their own polynomials; where `1 + erf` or
`1 + tanh` cancels, the bound is absolute, a few ulp of 1 times |x|). The CUDA kernels lower for sm_90a and
sm_100a (and build with nvcc where it is installed) and call CUDA's `tanhf`, `erff`, `expf` and `log1pf`, as
torch's CUDA kernels do."""

import pytest

from spec_trees import generated_tree, run
from tkgen import registry

SPEC = """\
op: activations
family: demo
doc: The library's activation functions of x, one output each.
dims:
  T: {dynamic: true, doc: rows}
  H: {doc: channels, min: 1, max: 4096, test_values: [5, 64]}
axes: {t: T, h: H}
inputs:
  x: {dtypes: [fp32, bf16], shape: [T, H], view: [t, h],
      values: {specials: [zero_rows, max, subnormal, neg_zero, inf, nan, huge, tiny]}}
outputs:
  y_tanh: {dtype: fp32, shape: [T, H], view: [t, h]}
  y_erf: {dtype: fp32, shape: [T, H], view: [t, h]}
  y_gelu: {dtype: fp32, shape: [T, H], view: [t, h]}
  y_gelu_tanh: {dtype: fp32, shape: [T, H], view: [t, h]}
  y_silu: {dtype: fp32, shape: [T, H], view: [t, h]}
  y_softplus: {dtype: fp32, shape: [T, H], view: [t, h]}
compute:
  - xf = load(x)
  - y_tanh = tanh(xf)
  - y_erf = erf(xf)
  - y_gelu = gelu(xf)
  - y_gelu_tanh = gelu_tanh(xf)
  - y_silu = silu(xf)
  - y_softplus = softplus(xf)
tests:
  max_rows: 20
"""

CHECK = """
import sys, torch
import torch.nn.functional as F
from tkgen import registry
registry.use_generated(sys.argv[1])
from tkgen_generated.demo.activations import op, reference

M = torch.finfo(torch.float32).max
SPECIALS = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), M, -M, M / 2, -M / 2, 1e-45, -1e-45, 1e-38,
            -1e-38, 1.0, -1.0, 3.0, -3.0, -5.5, -5.6, -6.0, -10.0, -20.0, -100.0, -1e13, 1e13, 19.999998, 20.0,
            20.000002, 88.7, 89.0, -88.7, -104.0]
g = torch.Generator().manual_seed(0)
vals = torch.cat([torch.tensor(SPECIALS), torch.linspace(-12, 12, 4001), torch.randn(12000, generator=g) * 4,
                  torch.randn(6000, generator=g) * 1e-3, torch.randn(6000, generator=g) * 100])
n, H = vals.numel(), 64
x = torch.cat([vals, torch.zeros(-n % H)]).reshape(-1, H)
outs = [o.reshape(-1)[:n] for o in op.activations(x)]
refs = [r.reshape(-1)[:n] for r in reference.VARIANTS["base"](x)]
FNS = {"tanh": torch.tanh, "erf": torch.erf, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
       "silu": F.silu, "softplus": F.softplus}


def same_bits(a, b):
    return (a.view(torch.int32) == b.view(torch.int32)) | (a.isnan() & b.isnan())


k = len(SPECIALS)
for (name, fn), o, r in zip(FNS.items(), outs, refs):
    assert same_bits(o, r).all(), (name, "kernel and reference")
    # torch's elementwise path (a one-element tensor) on the special values, bit for bit
    t = torch.stack([fn(vals[i:i + 1])[0] for i in range(k)])
    bad = [(SPECIALS[i], o[i].item(), t[i].item()) for i in range(k) if not same_bits(o[i:i + 1], t[i:i + 1])]
    assert not bad, (name, bad)
    # torch's vectorised kernels on the rest: a few ulp, and where 1 + erf (tanh) cancels, 0.5 |x| times
    # the absolute error of torch's vectorised erf near -1 (measured up to about 9 * 2^-24; bound 2^-20)
    t = fn(x).reshape(-1)[:n]
    rest = slice(k, n)
    o, t, v = o[rest], t[rest], vals[rest]
    assert (o.isnan() == t.isnan()).all() and (o.isinf() == t.isinf()).all(), name
    fin = t.isfinite()
    ulp = torch.nextafter(t.abs(), torch.tensor(float("inf"))) - t.abs()
    bound = 4 * ulp + (v.abs() * 2.0 ** -21 if name.startswith("gelu") else 0)
    err = (o - t).abs()
    assert (err[fin] <= bound[fin]).all(), (name, v[fin][(err > bound)[fin]][:5].tolist())
# gelu_tanh's tail: 1 + tanh(inner) is +0.0 below about -5.5, so the result is -0.0, as torch's
tail = (vals < -5.5) & vals.isfinite()
assert (outs[3][tail].view(torch.int32) == (-torch.zeros(1)).view(torch.int32)).all()
assert (F.gelu(vals[tail], approximate="tanh").view(torch.int32) == outs[3][tail].view(torch.int32)).all()
print("ok")
"""

LOWER = """
import shutil, sys
from tkgen import registry
from tkgen.runtime.compile import lower_source, nvcc_cubin
from tkgen.runtime.kernels import kernel_module
registry.use_generated(sys.argv[1])
for arch, sm in (("sm90", "sm_90a"), ("sm100", "sm_100a")):
    kernels = kernel_module("tkgen_generated.demo.activations", arch)
    src = lower_source(kernels, "base", (64, "bf16"))
    for fn in ("tanhf(", "erff(", "expf(", "log1pf("):
        assert fn in src, (arch, fn)
    assert "__tanhf" not in src and "__expf" not in src, arch
    if shutil.which("nvcc"):          # built as the runtime builds it (the profile's -fmad=false)
        r = nvcc_cubin(src, sm, kernels.table.COMPILE_FLAGS)
        assert r.returncode == 0, (arch, r.stderr[-2000:])
    print(arch)
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    specs, out = generated_tree(tmp_path_factory.mktemp("activations"), {"activations": SPEC})
    return specs, out


def test_cpu_kernel_against_its_reference_and_torch(tree):
    r = run("-c", CHECK, str(tree[1]))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.split() == ["ok"]


def test_cpu_kernel_fuzzed_against_its_reference(tree):
    specs, out = tree
    r = run("-m", "tkgen.tools.cli", "--specs", str(specs), "fuzz", "activations", "--examples", "8", "--seed", "3",
            "--generated", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "kernel and reference agree" in r.stdout


def test_cuda_kernels_lower_and_call_the_cuda_math_library(tree):
    r = run("-c", LOWER, str(tree[1]))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert r.stdout.split() == ["sm90", "sm100"]


def test_activations_take_f32(tmp_path):
    from tkgen.driver import validate_files
    p = tmp_path / "op.yaml"
    p.write_text(SPEC.replace("y_silu = silu(xf)", "y_silu = to_f32(silu(iota(h)))"))
    errors = validate_files([p], registry.specs_dir())
    assert len(errors) == 1 and "takes an f32, found i32" in str(errors[0]), errors
