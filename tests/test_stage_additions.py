"""The stages added for the next families (issue 11, item 7): integer operators on i32 and i64 (int64 end
to end), conversions, `iota`, `broadcast`, `log1p`, `fma`, the `inf` literal, ordered folds, gathers
through a top-k result and top-k values, slice views (segments of a packed input), and tile matmuls.

The small specs of tests/stage_specs/ are generated into a temporary tree (validated, and every module
audited), their CPU kernels fuzzed against their references bit for bit, checked against formulas written
independently (tests/stage_oracles.py), and lowered for sm_90a. The type rules and the integer semantics
are checked here on the IR."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tkgen.spec import expr as E
from tkgen.ir import prim as ir
from tkgen import registry
from tkgen.driver import validate_files
from tkgen.codegen.printers import TorchPrinter
from tkgen.runtime import torch_prims as P
from tkgen.lower.stages.elementwise import binary

HERE = Path(__file__).parent
SPECS = sorted((HERE / "stage_specs").glob("*.yaml"))
OPS = [p.stem for p in SPECS]


def run(*args, env=None):
    """A Python subprocess in the repository, importing this checkout's tkgen."""
    path = os.pathsep.join([str(registry.REPO), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=registry.REPO,
                          env={**os.environ, "PYTHONPATH": path, **(env or {})})


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("stage_additions")
    specs = root / "specs"
    shutil.copytree(registry.specs_dir() / "formats", specs / "formats")
    shutil.copytree(registry.specs_dir() / "archs", specs / "archs")
    (specs / "demo").mkdir()
    for p in SPECS:
        shutil.copy(p, specs / "demo" / p.name)
    out = root / "generated"
    r = run("-m", "tkgen.tools.cli", "--specs", str(specs), "validate", str(specs))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run("-m", "tkgen.tools.cli", "--specs", str(specs), "generate", "--out", str(out))   # audits every module
    assert r.returncode == 0, r.stdout + r.stderr
    return specs, out


@pytest.mark.parametrize("op", OPS)
def test_cpu_kernel_matches_its_reference_bit_for_bit(tree, op):
    specs, out = tree
    r = run("-m", "tkgen.tools.cli", "--specs", str(specs), "fuzz", op, "--examples", "6", "--seed", "2",
            "--generated", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "kernel and reference agree" in r.stdout


def test_cpu_kernels_match_independent_formulas(tree):
    specs, out = tree
    r = run(str(HERE / "stage_oracles.py"), *OPS, env={"TKGEN_SPECS": str(specs), "TKGEN_GENERATED": str(out)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.split() == [w for op in OPS for w in (op, "ok")]


LOWER = """
import shutil, sys
from tkgen import registry
from tkgen.runtime.compile import lower_source, nvcc_cubin
from tkgen.runtime.kernels import kernel_module
registry.use_generated(sys.argv[1])
cases = [("folds", (7, 4, "fp32")), ("gathers", (9, 3)), ("segs", (2, 5, "bf16")), ("int_mix", (5, 40)),
         ("float_mix", (7, 3, "bf16")), ("products", (24, 8, "bf16"))]
for arch, sm, ops in (("sm90", "sm_90a", None), ("sm100", "sm_100a", ("folds", "segs", "products"))):
    for op, args in cases:
        if ops and op not in ops:
            continue
        src = lower_source(kernel_module(f"tkgen_generated.demo.{op}", arch), "base", args)
        assert "__global__" in src, op
        if shutil.which("nvcc"):
            r = nvcc_cubin(src, sm)
            assert r.returncode == 0, (op, sm, r.stderr[-2000:])
        print(op, arch)
"""


def test_cuda_lowering_of_the_new_stages(tree):
    """sm_90a source for every spec and sm_100a for two (built with nvcc where it is installed).
    Gathers and folds read a shared copy of their source (the element at a data-dependent index lies in
    another thread's registers), and a top-k result read by later stages is collected in shared memory."""
    r = run("-c", LOWER, str(tree[1]))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert len(r.stdout.split()) == 2 * 9


def test_fma_prints_per_target(tree):
    out = tree[1] / "demo" / "float_mix"
    assert "T.fma(" in (out / "kernel_cuda.py").read_text()
    cpu = (out / "kernel_cpu.py").read_text()
    assert "T.fma(" not in cpu and '"float64") + T.cast(' in cpu


# -- integer semantics, on the IR ---------------------------------------------------------------------
def _eval(e, **values):
    return eval(TorchPrinter()(e), vars(P), values)  # noqa: S307  (generated source of our own IR)


def _op(o, dtype):
    a, b = ir.Var("a", dtype), ir.Var("b", dtype)
    return binary(None, 0, E.Binary(o, E.Name("a"), E.Name("b")), a, b)


def _wrap(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


@pytest.mark.parametrize("dtype,bits", [(ir.I32, 32), (ir.I64, 64)])
def test_integer_operators_are_total_and_wrap(dtype, bits):
    lo, hi = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    xs = [lo, lo + 1, -7, -1, 0, 1, 7, hi - 1, hi]
    ys = [lo, -3, -1, 0, 1, 2, 3, hi]
    a = torch.tensor([x for x in xs for _ in ys])
    b = torch.tensor([y for _ in xs for y in ys])
    q, r = _eval(_op("//", dtype), a=a, b=b), _eval(_op("%", dtype), a=a, b=b)
    for x, y, gq, gr in zip(a.tolist(), b.tolist(), q.tolist(), r.tolist()):
        want_q = 0 if y == 0 else _wrap(-x, bits) if y == -1 else x // y
        assert (gq, gr) == (want_q, 0 if y in (0, -1) else x % y), (x, y)
    shifts = torch.tensor([0, 1, bits - 1, bits, bits + 3, -1, 1000])
    for o, fn in (("<<", lambda x, s: _wrap(x << (s % bits), bits)), (">>", lambda x, s: x >> (s % bits))):
        got = _eval(_op(o, dtype), a=torch.tensor([xs[1]] * 7), b=shifts)
        assert got.tolist() == [fn(xs[1], s) for s in shifts.tolist()]
    for o, fn in (("&", int.__and__), ("|", int.__or__), ("^", int.__xor__)):
        assert _eval(_op(o, dtype), a=a, b=b).tolist() == [fn(x, y) for x, y in zip(a.tolist(), b.tolist())]


def test_float_to_integer_conversions_saturate():
    from tkgen.lower.stages.elementwise import _convert
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.9, -3.9, 2.0 ** 31, -2.0 ** 31, 2.0 ** 62])
    assert _eval(_convert("to_i32", ir.Var("x", ir.F32)), x=x).tolist() == \
        [0, 2 ** 31 - 1, -2 ** 31, 3, -3, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1]
    assert _eval(_convert("to_i64", ir.Var("x", ir.F32)), x=x).tolist()[-1] == 2 ** 62


def _nearest_f32(v):
    """The float32 nearest to a rational (ties to even), by comparing the neighbours exactly."""
    import struct
    from fractions import Fraction
    r = struct.unpack("<i", struct.pack("<f", float(v)))[0]
    cands = [struct.unpack("<f", struct.pack("<i", r + d))[0] for d in (-1, 0, 1)]
    return min(cands, key=lambda c: (abs(Fraction(c) - v), struct.unpack("<i", struct.pack("<f", c))[0] & 1))


def test_fma_rounds_once_on_cuda_and_as_documented_on_the_cpu():
    """The CUDA reference's fma is correctly rounded (against exact rationals); on CPU tensors it is the
    exact product plus the addend rounded to float64, then to float32, which is what the C kernels do."""
    from fractions import Fraction
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3000, generator=g), torch.randn(3000, generator=g)
    c = -(a * b) + torch.randn(3000, generator=g) * 2.0 ** -30      # cancellation: the rounding decides
    want = [_nearest_f32(Fraction(x) * Fraction(y) + Fraction(z))
            for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]
    assert P._fma_rn(a, b, c).tolist() == want
    assert torch.equal(P._fma(a, b, c), (a.double() * b.double() + c.double()).float())


# -- type rules ---------------------------------------------------------------------------------------
def _error(tmp_path, name, old, new):
    text = (HERE / "stage_specs" / f"{name}.yaml").read_text()
    assert old in text, old
    p = tmp_path / "op.yaml"
    p.write_text(text.replace(old, new))
    errors = validate_files([p], registry.specs_dir())
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("name,old,new,words", [
    ("int_mix", "q = x // y", "q = x / y", "integers divide with '//'"),
    ("int_mix", "q = x // y", "q = x // 0", "division by zero"),
    ("int_mix", "r = x % y", "r = to_i64(to_f32(x) % 2.0)", "takes integers"),
    ("int_mix", "w = to_i32(x ^ -1)", "w = to_i32(y ^ 4294967296)", "does not fit in i32"),
    ("int_mix", "m = ((y << sh)", "m = ((to_f32(y) << sh)", "takes integers"),
    ("float_mix", "i = broadcast(iota(t), k)", "i = broadcast(iota(t), t)", "varies over axis 't' already"),
    ("float_mix", "to_f32(iota(k))", "to_f32(iota(xf))", "expected an axis"),
    ("folds", "s = fold(sum, xf, h, -0.0)", "s = fold(max, xf, h, -0.0)", "one of sum, prod"),
    ("folds", "s = fold(sum, xf, h, -0.0)", "s = fold(sum, xf, h, xf)", "must not vary over axis 'h'"),
    ("folds", "s = fold(sum, xf, h, -0.0)", "s = fold(sum, xf, h, 0.0, sideways)", "ascending or descending"),
    ("folds", "q = fold(prod, load(n), h, 3)", "q = fold(prod, load(n), h, 3.5)", "start value is f32"),
    ("folds", "s = fold(sum, xf, h, -0.0)", "s = fold(xor, xf, h, -0.0)", "xor folds integers"),
    ("folds", "s = fold(sum, xf, h, -0.0)", "s = fold(sum, xf, b, -0.0)", "runs along the rows"),
    ("gathers", "gid = gather(load(ids), top, e)", "gid = gather(load(ids), s, e)", "indices are integers"),
    ("gathers", "gid = gather(load(ids), top, e)", "gid = gather(load(ids), load(ids), e)", "must not vary over axis"),
    ("gathers", "top = topk(s, e, j)", "top = topk(load(pick), j, e)", "topk ranks float values"),
    ("segs", "kf = load(kv, k)", "kf = load(kv)", "one segment at a time"),
    ("segs", "kf = load(kv, k)", "kf = load(kv, w)", "one segment at a time"),
    ("segs", "out = load(x) * kf + vf", "out = load(x, k) * kf + vf", "has no segments"),
])
def test_type_rules(tmp_path, name, old, new, words):
    e = _error(tmp_path, name, old, new)
    assert words in e.message and e.field_path[0] == "compute", str(e)


def test_segments_are_checked_where_they_are_written(tmp_path):
    e = _error(tmp_path, "segs", "  ab: {dtype: fp32, shape: [T, D], view: [t, d]}",
               "  ab: {dtype: fp32, shape: [T, D], view: [t, {p: d, q: d}]}")
    assert e.field_path == ("outputs", "ab", "view", 1) and "input of plain dtype" in e.message
    e = _error(tmp_path, "segs", "view: [t, {k: h, v: []}, d]", "view: [t, {k: h, v: []}, {a: d, b: []}]")
    assert e.field_path == ("inputs", "kv", "view", 2) and "one dim" in e.message
    e = _error(tmp_path, "segs", "view: [t, {k: h, v: []}, d]", "view: [t, {k: h, Bad: []}, d]")
    assert e.field_path == ("inputs", "kv", "view", 1, "Bad") and "name" in e.message


def test_bit_operators_stay_out_of_constant_expressions(tmp_path):
    e = _error(tmp_path, "int_mix", "shape: [T], view: [t]}", "shape: [T << 1], view: [t]}")
    assert e.field_path == ("outputs", "top", "shape", 0) and "integer compute" in e.message


def test_the_tokenizer_reads_the_new_operators_with_pythons_precedence():
    node = E.parse("a | b ^ c & d << 2 + 1 == x")
    assert E.to_source(node) == "(a | (b ^ (c & (d << (2 + 1))))) == x"
    assert E.to_source(E.parse("-a >> b")) == "-a >> b"
