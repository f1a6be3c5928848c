"""Optional inputs in every combination of present and absent (issue 26, item 3): inputs of one shape and
dtype (LayerNorm's weight and bias) gave variants whose kernels differ in a parameter's *name*, which the
variant merger (tkgen/codegen/merge_variants.py) had taken for a differing annotation, so the merged factory
declared one of them and the call raised NameError. Each combination is called on the C target against
its reference and a formula written here, and each variant's CUDA kernel lowers with its own parameters."""
import re

import pytest

from spec_trees import generated_tree, run
from tkgen.codegen.merge_variants import Printed, merge

SPEC = """\
op: opt_affine
family: demo
doc: y = (x * a + b) * c with a, b and c optional, all three of one shape and dtype.
dims:
  T: {dynamic: true, doc: rows}
  H: {doc: channels, min: 1, max: 256, test_values: [3, 32]}
axes: {t: T, h: H}
inputs:
  x: {dtypes: [fp32, bf16], shape: [T, H], view: [t, h]}
  a: {dtype: fp32, shape: [H], view: [h], optional: true, absent: 1.0}
  b: {dtype: fp32, shape: [H], view: [h], optional: true, absent: -0.0}
  c: {dtype: fp32, shape: [H], view: [h], optional: true, absent: 1.0}
outputs:
  y: {dtype: fp32, shape: [T, H], view: [t, h]}
compute:
  - y = (load(x) * load(a) + load(b)) * load(c)
tests:
  max_rows: 20
"""

LAYERNORM = """\
op: layer_norm
family: demo
doc: LayerNorm over the channels with an optional weight and an optional bias, both [H] like x.
params:
  eps: {type: float, default: 1.0e-5, doc: added to the variance}
dims:
  T: {dynamic: true, doc: rows}
  H: {doc: channels, min: 1, max: 4096, test_values: [7, 64]}
axes: {t: T, h: H}
inputs:
  x: {dtypes: [fp32, bf16], shape: [T, H], view: [t, h]}
  weight: {like: x, shape: [H], view: [h], optional: true, absent: 1.0}
  bias: {like: x, shape: [H], view: [h], optional: true, absent: -0.0}
outputs:
  y: {dtype: fp32, shape: [T, H], view: [t, h]}
compute:
  - xf = load(x)
  - mu = fold(sum, xf, h, 0.0) / H
  - d = xf - mu
  - d2 = d * d
  - rstd = rsqrt(fold(sum, d2, h, 0.0) / H + eps)
  - y = d * rstd * load(weight) + load(bias)
tests:
  max_rows: 20
"""

LAYERNORM_CALL = """
import itertools, sys, torch
import torch.nn.functional as F
from tkgen import registry
registry.use_generated(sys.argv[1])
from tkgen_generated.demo.layer_norm import op, reference
g = torch.Generator().manual_seed(1)
for dtype in (torch.float32, torch.bfloat16):
    x = (torch.randn(9, 64, generator=g) * 3 + 1).to(dtype)
    w, b = (torch.randn(64, generator=g).to(dtype) for _ in range(2))
    for given in itertools.product((False, True), repeat=2):
        args = [t if on else None for t, on in zip((w, b), given)]
        y = op.layer_norm(x, *args, eps=1e-5)
        name = "_".join(f"with_{n}" for n, on in zip(("weight", "bias"), given) if on) or "base"
        want = reference.VARIANTS[name](x, *args, 1e-5)[0]
        assert torch.equal(y.view(torch.int32), want.view(torch.int32)), (dtype, name)
        torch_y = F.layer_norm(x.float(), (64,), *[a.float() if a is not None else None for a in args], eps=1e-5)
        torch.testing.assert_close(y, torch_y, rtol=1e-5, atol=1e-5)
        print(name)
"""

CALL = """
import itertools, sys, torch
from tkgen import registry
registry.use_generated(sys.argv[1])
from tkgen_generated.demo.opt_affine import op, reference
g = torch.Generator().manual_seed(0)
for dtype in (torch.float32, torch.bfloat16):
    x = (torch.randn(7, 32, generator=g) * 4).to(dtype)
    x[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")])
    a, b, c = (torch.randn(32, generator=g) for _ in range(3))
    b[1] = -0.0
    for given in itertools.product((False, True), repeat=3):
        args = [t if w else None for t, w in zip((a, b, c), given)]
        y = op.opt_affine(x, *args)
        name = "_".join(f"with_{n}" for n, w in zip("abc", given) if w) or "base"
        want = reference.VARIANTS[name](x, *args)[0]
        xf = x.float()
        formula = (xf * (a if given[0] else 1.0) + (b if given[1] else -0.0)) * (c if given[2] else 1.0)
        bits = lambda t: t.view(torch.int32)
        assert torch.equal(bits(y), bits(want)), (dtype, name)
        assert torch.equal(bits(y), bits(formula)), (dtype, name)
        print(name)
"""

LOWER = """
import re, shutil, sys
from tkgen import registry
from tkgen.runtime.compile import lower_source, nvcc_cubin
from tkgen.runtime.kernels import kernel_module
registry.use_generated(sys.argv[1])
for arch, sm in (("sm90", "sm_90a"), ("sm100", "sm_100a")):
    kernels = kernel_module("tkgen_generated.demo.opt_affine", arch)
    for name in ("base", "with_a", "with_b", "with_c", "with_a_with_b", "with_a_with_c", "with_b_with_c",
                 "with_a_with_b_with_c"):
        src = lower_source(kernels, name, (32, "bf16"))
        if name in ("with_a", "with_b_with_c") and shutil.which("nvcc"):    # two of them built
            r = nvcc_cubin(src, sm, kernels.table.COMPILE_FLAGS)
            assert r.returncode == 0, (arch, name, r.stderr[-2000:])
        head = src[src.index("__global__"):].splitlines()[0]      # the kernel's declaration
        params = re.findall(r"__restrict__ (\\w+)", head)
        print(arch, name, "".join(sorted(p for p in params if p in "abc")) or "-")
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    specs, out = generated_tree(tmp_path_factory.mktemp("optional_inputs"), {"opt_affine": SPEC, "layer_norm": LAYERNORM})
    return out


def test_every_combination_of_optional_inputs_runs_on_the_c_target(tree):
    r = run("-c", CALL, str(tree))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert len(r.stdout.split()) == 2 * 8


def test_layer_norm_with_an_optional_weight_and_bias_in_every_combination(tree):
    r = run("-c", LAYERNORM_CALL, str(tree))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert len(r.stdout.split()) == 2 * 4


def test_every_combination_lowers_for_cuda_with_its_own_parameters(tree):
    r = run("-c", LOWER, str(tree))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    got = {tuple(line.split()[:2]): line.split()[2] for line in r.stdout.splitlines()}
    assert len(got) == 2 * 8
    for (arch, name), params in got.items():
        want = "".join(re.findall(r"with_([abc])", name)) or "-"
        assert params == want, (arch, name, params)


def _kernel(name, variant, param, body):
    return Printed(variant, name, [f"def {name}(H):", "    @T.prim_func", "    def kernel(",
                                   "        x: T.Tensor((H,), 'float32'),", f"        {param}: T.Tensor((H,), 'float32'),",
                                   "    ):", *[f"        {line}" for line in body], "    return kernel"])


def test_kernels_whose_parameters_differ_in_name_share_one_prim_func():
    """Parameters of different names (an optional input present or absent) are listed together, each
    annotated `None` where its variant lacks it; of one name and different annotations the annotation is
    chosen before the prim_func."""
    def name(v):
        return "_".join(f"{k}{v[k]}" for k in sorted(v)) or "base"
    body = ["y = 1", "z = 2", "w = 3", "v = 4", "u = 5"]
    apart = [_kernel("build_with_a", {"?a": True, "?b": False}, "a", body),
             _kernel("build_with_b", {"?a": False, "?b": True}, "b", body)]
    functions, aliases = merge(apart, name)
    assert len(aliases) == 2 and len(functions) == 1
    assert "        a: T.Tensor((H,), 'float32') if with_a else None,\n" in functions[0]
    assert "        b: T.Tensor((H,), 'float32') if with_b else None,\n" in functions[0]
    together = [_kernel("build_p1", {"p": 1}, "a", body),
                _kernel("build_p2", {"p": 2}, "a", body[:-1] + ["u = 6"])]
    together[1].lines[4] = "        a: T.Tensor((2 * H,), 'float32'),"
    functions, aliases = merge(together, name)
    assert len(functions) == 1 and len(aliases) == 2
    assert "PARAM_a = T.Tensor((2 * H,), 'float32')" in functions[0]


def test_the_audit_rejects_a_name_bound_only_in_another_function():
    """The merged factory of the fault read `a`, a parameter of another variant's function: the module
    bound the name somewhere, but not where it was read. The audit (run by validate and generate) now
    checks each top-level function's reads against its own bindings and the module's."""
    from tkgen.spec.safety import AuditError, audit_module
    ok = "def f(a, b):\n    return a + b\n\n\ndef g(b):\n    c = [b for _ in range(2)]\n    return f(b, c)\n"
    audit_module("ok.py", ok)
    with pytest.raises(AuditError, match="name 'a' is bound neither in function 'g'"):
        audit_module("bad.py", ok.replace("return f(b, c)", "return f(a, c)"))
