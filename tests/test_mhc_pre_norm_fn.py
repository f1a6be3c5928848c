"""mhc_pre_norm_fn and the `matmul` stage under it: the CPU kernel's products' sum is the reference's
ordered loop bit for bit (streamed in chunks, with and without a norm weight), the mixes against a float64
formula and against the torch formula of tkgen.nn.functional.mhc_norm_fn, the compat layer's TileKernels
signature, and the T.gemm form lowering to tensor-core code for sm_90a and sm_100a (no GPU needed)."""
import shutil

import pytest
import torch

import tkgen.nn.functional as F
import tkgen.ops as ops
from tkgen import registry
from tkgen.compat import tilekernels_v1 as tk1
from tkgen.runtime.compile import lower_source, nvcc_cubin
from tkgen.runtime.kernels import kernel_module
from tkgen.testing import check as C

GEN = torch.Generator().manual_seed(11)


def rand(*shape, scale=1.0):
    return torch.randn(*shape, generator=GEN) * scale


def tf32(v):
    """TileKernels' TF32 rounding of a float32 tensor: 0x1000 added to the bits, the low 13 bits cleared."""
    return ((v.view(torch.int32) + 0x1000) & -8192).view(torch.float32)


def formula64(r, fn, w, eps):
    """The mixes in float64 from the same float32 inputs (the weight rounded to TF32 first)."""
    r, f = r.double(), tf32(fn if w is None else fn * w).double()
    return (r @ f.T) * torch.rsqrt((r * r).sum(-1, keepdim=True) / r.shape[-1] + eps)


def test_the_weight_is_rounded_to_tf32_as_tilekernels_rounds_it():
    """Ties away from zero in magnitude, both signs; a carry into the exponent; the low 13 bits cleared."""
    bits = torch.tensor([0x3F801000, 0x3F800FFF, 0x3F803000, 0x3FFFF000, 0x00001000, 0x7F7FF000], dtype=torch.int32)
    w = torch.cat([bits, bits | -0x80000000]).view(torch.float32)
    want = torch.tensor([0x3F802000, 0x3F800000, 0x3F804000, 0x40000000, 0x00002000, 0x7F800000], dtype=torch.int32)
    want = torch.cat([want, want | -0x80000000])
    assert torch.equal(tf32(w).view(torch.int32), want)
    n, k = w.numel(), 32
    r = torch.ones(1, k, dtype=torch.bfloat16)        # sum of squares / K = 1: mixes[0, i] = F[i, i]
    fn = torch.zeros(n, k)
    fn[range(n), range(n)] = w
    got = ops.mhc_pre_norm_fn(r, fn, None, eps=0.0)[0]
    assert torch.equal(got[0].view(torch.int32), tf32(w).view(torch.int32))


def ordered(r, f):
    """The ordered float32 sum of the products, written out here: k ascending, from +0.0."""
    acc = torch.zeros(r.shape[0], f.shape[0])
    for k in range(r.shape[1]):
        acc = acc + r[:, k:k + 1] * f[:, k][None, :]
    return acc


@pytest.mark.parametrize("with_weight", [False, True])
def test_the_products_sum_is_the_ordered_loop_bit_for_bit(with_weight):
    """Residuals of small integers make every sum of squares exact in any order, so the mixes isolate the
    products' sum: the kernel's (streamed in chunks of 32 over K = 160) must be the ordered loop's, to the
    bit, and so must the reference's. fn's values are not integers: their sum depends on the order."""
    t, k, n, eps = 7, 160, 24, 1e-6
    r = torch.randint(-3, 4, (t, k), generator=GEN).to(torch.bfloat16)
    r[2] = 0                                       # a zero row: rsqrt(eps) times +0.0
    fn = rand(n, k, scale=0.1)
    fn[3, 5] = -0.0
    w = rand(k) + 1 if with_weight else None
    f = tf32(fn if w is None else fn * w)
    rf = r.float()
    want = ordered(rf, f) * torch.rsqrt((rf * rf).sum(-1, keepdim=True) / k + torch.tensor(eps, dtype=torch.float32))
    got = ops.mhc_pre_norm_fn(r, fn, w, eps=eps)[0]
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    outs, refs = C.check_tensors("mhc_pre_norm_fn", {"residual": r, "fn": fn, "norm_weight": w}, {"eps": eps})
    assert torch.equal(refs[0].view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize("t, k, n", [(1, 32, 1), (37, 512, 24), (5, 96, 4)])
def test_mixes_against_float64(t, k, n):
    """Against the exact sums rounded once: float32's ordered sum of K products and a float32 sum of
    squares, well within TF32's tolerance the spec declares."""
    r = rand(t, k).to(torch.bfloat16)
    fn, w = rand(n, k, scale=1e-2), rand(k) * 0.1 + 1
    for weight in (None, w):
        got = ops.mhc_pre_norm_fn(r, fn, weight, eps=1e-6)[0].double()
        want = formula64(r.float(), fn, weight, 1e-6)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * float(want.abs().max()))


def test_nn_functional_is_the_op_and_the_torch_formula_it_replaced():
    m, d, rows = 4, 64, 24
    res = rand(3, 5, m, d).to(torch.bfloat16)
    fn, w = rand(rows, m * d, scale=1e-2), rand(m * d) * 0.1 + 1
    got = F.mhc_norm_fn(res, fn, w, 1e-6)
    mixes, out_mul, sqrsum = ops.mhc_pre_norm_fn(res.reshape(15, m * d), fn, w, eps=1e-6)
    assert torch.equal(got, mixes.reshape(3, 5, rows))
    # the torch formula it replaced (a float32 matmul of the weight not rounded): within TF32's rounding of
    # the weight, 2^-11 of each product
    r = res.flatten(-2).float()
    torch_formula = (r @ (fn * w).t()) * torch.rsqrt((r * r).sum(-1, keepdim=True) / r.shape[-1] + 1e-6)
    torch.testing.assert_close(got, torch_formula, rtol=2e-3, atol=1e-3 * float(torch_formula.abs().max()))
    # what the op does not take (an fp32 residual) is the torch formula, differentiable by torch
    same = F.mhc_norm_fn(res.float(), fn, w, 1e-6)
    torch.testing.assert_close(same, torch_formula, rtol=0, atol=0)


@pytest.mark.parametrize("with_weight", [False, True])
def test_gradients_against_float64_autograd(with_weight):
    """The generated backward against autograd of the float64 formula (the weight's TF32 rounding passed
    through as the identity, as TileKernels' backward does): within TF32's rounding of dA and F (2^-11 of
    each product) and bf16's of the residual gradient."""
    m, d, rows, t = 4, 16, 24, 37
    res = rand(t, m, d).to(torch.bfloat16).requires_grad_(True)
    fn = (rand(rows, m * d) * 0.1).requires_grad_(True)
    w = (rand(m * d) * 0.1 + 1).requires_grad_(True) if with_weight else None
    g = rand(t, rows)
    mixes = F.mhc_norm_fn(res, fn, w, 1e-6)
    grads = torch.autograd.grad(mixes, [res, fn] + ([w] if with_weight else []), g)
    r64, fn64 = res.detach().double().requires_grad_(True), fn.detach().double().requires_grad_(True)
    w64 = w.detach().double().requires_grad_(True) if with_weight else None
    f64 = fn64 if w64 is None else fn64 * w64
    r = r64.flatten(-2)
    want_mixes = (r @ f64.T) * torch.rsqrt((r * r).sum(-1, keepdim=True) / r.shape[-1] + 1e-6)
    want = torch.autograd.grad(want_mixes, [r64, fn64] + ([w64] if with_weight else []), g.double())
    want_mixes = want_mixes.detach()
    torch.testing.assert_close(mixes.detach().double(), want_mixes, rtol=2e-3,
                               atol=1e-3 * float(want_mixes.abs().max()))
    for name, got, ref in zip(("residual", "fn", "norm_weight"), grads, want):
        assert got.dtype == (torch.bfloat16 if name == "residual" else torch.float32), name
        torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=2e-3 * float(ref.abs().max()), msg=name)


def test_compat_signature():
    m, d = 4, 32
    res = rand(2, 3, m, d).to(torch.bfloat16)
    fn, w = rand(m * (m + 2), m * d, scale=1e-2), rand(m * d) + 1
    got = tk1.modeling.mhc.ops.mhc_pre_norm_fn(res, fn, w, 1e-6, fuse_grad_acc=False, n_splits=16)
    assert got.shape == (2, 3, m * (m + 2)) and got.dtype == torch.float32
    assert torch.equal(got, ops.mhc_pre_norm_fn(res.reshape(6, m * d), fn, w, eps=1e-6)[0].reshape(2, 3, -1))
    fn.requires_grad_(True)
    tk1.modeling.mhc.ops.mhc_pre_norm_fn(res, fn, None, 1e-6).sum().backward()
    assert fn.grad is not None and fn.grad.shape == fn.shape


@pytest.mark.parametrize("arch, sm", [("sm90", "sm_90a"), ("sm100", "sm_100a")])
def test_the_cuda_form_is_a_tensor_core_tile_matmul(arch, sm):
    """The T.gemm forms lower to mma instructions on TF32 operands (the forward: fn's 24 rows padded to 32,
    K streamed in chunks of 64, pipelined; the backward: its three matmuls over n and over the tokens);
    where nvcc is installed they build."""
    for op, matmuls in (("mhc_pre_norm_fn", 1), ("mhc_pre_norm_fn_backward", 3)):
        src = lower_source(kernel_module(registry.op_package(op), arch), "with_norm_weight", (28672, 24, 1e-6))
        tf32 = "mma_sync<tl::DataType::kTensorFloat32, tl::DataType::kTensorFloat32, tl::DataType::kFloat32"
        assert src.count(tf32) >= matmuls, op
        if shutil.which("nvcc"):
            r = nvcc_cubin(src, sm)
            assert r.returncode == 0, (op, r.stderr[-2000:])


def _validate(tmp_path, old, new):
    from tkgen.driver import validate_files
    good = (registry.specs_dir() / "mhc" / "mhc_pre_norm_fn.yaml").read_text()
    bad = good.replace(old, new)
    assert bad != good
    p = tmp_path / "op.yaml"
    p.write_text(bad.replace("op: mhc_pre_norm_fn", "op: pre_norm_variant").split("\nbackward:")[0] + "\n")
    return validate_files([p], registry.specs_dir())


@pytest.mark.parametrize("line, message", [
    ("a = matmul(r, r, k)", "the two values share axis 't'"),
    ("a = matmul(r, f, n)", "'r' does not vary over axis 'n'"),
    ("fi = bits(f)\n  - a = matmul(r, fi, k)", "matmul multiplies float values, found i32 ('fi')"),
    ("p = r * f\n  - a = matmul(p, f, k)", "'p' must vary over 'k' and one other axis, not t, n, k"),
    ("a = matmul(r, bits(f), k)", "expected a value computed by an earlier stage"),
])
def test_matmul_rejects_what_it_cannot_run(tmp_path, line, message):
    errors = _validate(tmp_path, "out_mul = matmul(r, f, k)", line.replace("a = ", "out_mul = "))
    assert len(errors) == 1 and message in errors[0].message, errors
    assert errors[0].field_path[0] == "compute"


def test_a_stream_the_kernels_cannot_take_points_at_the_schedule(tmp_path):
    """Streaming n, which the matmul's result and the stores vary over but nothing reduces, would leave the
    rsqrt's sum (over k, not over n) and the store after a loop that writes a chunk of n at a time."""
    errors = _validate(tmp_path, "stream: {k: 32}", "stream: {k: 32, n: 8}")
    assert len(errors) == 1 and "cpu schedule" in errors[0].message, errors
    assert errors[0].field_path[:2] == ("schedule", "cpu")
    errors = _validate(tmp_path, "stream: {k: 32}", "stream: {q: 32}")
    assert len(errors) == 1 and "unknown axis 'q' in `stream`" in errors[0].message, errors


def test_a_streamed_loop_keeps_what_its_results_feed_after_it():
    """On the IR: what does not vary over k runs before the loop unless it reads the loop's results, or
    reads what reads them (c2 reads only c1, which reads the sum); the sum starts at 0 and accumulates."""
    from tkgen.ir import prim as ir, kernel as kir
    from tkgen.ir.prim import F32, op
    from tkgen.schedule.stream import stream_body
    buf = {n: kir.Buffer(n, axes, F32) for n, axes in
           (("x", ("t", "k")), ("v", ("t",)), ("s", ("t",)), ("c1", ("t",)), ("c2", ("t",)))}
    read = {n: ir.Read(n, F32) for n in buf}
    body = [kir.Compute(buf["x"], ir.c(1.0)), kir.Compute(buf["v"], ir.c(2.0)),
            kir.Reduce(buf["s"], buf["x"], "k", "sum"), kir.Compute(buf["c1"], op("mul", read["s"], ir.c(2.0))),
            kir.Compute(buf["c2"], op("add", read["c1"], read["v"]))]
    before, fill, loop, *after = stream_body(body, "k")
    assert before.dst.name == "v" and isinstance(fill, kir.Fill) and fill.dst.name == "s"
    assert isinstance(loop, kir.Loop) and loop.var == "b_k" and [type(s) for s in loop.body] == [kir.Compute, kir.Reduce]
    assert loop.body[1].accumulate and [s.dst.name for s in after] == ["c1", "c2"]
    with pytest.raises(ValueError, match="x varies over it and is read after its reductions"):
        stream_body(body + [kir.Compute(buf["c2"], op("add", ir.Read("x", F32, (ir.i32(0), ir.i32(0))), read["s"]))],
                    "k")


OVERFLOW_CASE = registry.REPO / "docs/measurements/2026-12-07-cpu-fuzz-2000/mhc_pre_norm_fn_backward_overflow_case.json"


def test_the_drawn_values_keep_the_sums_over_the_tokens_finite_in_any_order():
    """The CPU fuzz campaign's case (2026-12-07): terms near 1e37 summed over 39 tokens, inf in the kernel's
    order and 7.1e36 in the reference's. The spec bounds the drawn magnitudes (`values: max_abs`); the same
    case drawn with the bound (its values but for a power of two) gives equal results."""
    import json
    from conftest import shipped_catalog
    spec = shipped_catalog().op("mhc_pre_norm_fn_backward")
    case = json.loads(OVERFLOW_CASE.read_text())
    bounded = {n: t.values["max_abs"] for n, t in spec.inputs.items() if "max_abs" in t.values}
    assert set(bounded) == {"grad_mixes", "residual", "fn", "norm_weight", "out_mul"}
    for name, bound in bounded.items():
        case["inputs"][name]["max_abs"] = bound
    C.run_case("mhc_pre_norm_fn_backward", case, "cpu")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_max_abs_scales_the_drawn_values_by_one_power_of_two(dtype):
    from tkgen.testing.inputs import materialize
    recipe = {"dtype": dtype, "seed": 3, "scale_exp": 20, "style": "wide", "specials": []}
    x, y = materialize(recipe, (64, 32)).float(), materialize({**recipe, "max_abs": 1.0e10}, (64, 32)).float()
    assert x.abs().max() > 1.0e10 >= y.abs().max()
    nonzero = y != 0
    assert torch.equal(x == 0, ~nonzero)
    ratio = (x[nonzero] / y[nonzero]).unique()
    assert ratio.numel() == 1 and float(ratio).is_integer() and (int(ratio) & (int(ratio) - 1)) == 0
