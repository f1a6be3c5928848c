"""Bulk copies (`kir.Copy`, printed `T.copy`) and the pass `bulk_copies` (tkgen/schedule/bulk_copies.py).

The statement prints for both backends: on the C target TileLang lowers `T.copy` to a loop over the box
(each dim predicated against the tensor's shape), so the CPU runs the pass's kernels and they are checked
here against the reference and, bit for bit, against the kernels without it; on CUDA the kernels lower for
sm_90a to bulk copies and build with nvcc where it is installed. The pass is off by default (no shipped
kernel changes) and turned on by its parameter."""
import dataclasses
import shutil

import pytest
import torch

from tkgen import registry
from tkgen.codegen import generate
from tkgen.ir import kernel as kir
from tkgen.ir import prim as ir
from tkgen.ir import show
from tkgen.ir.verify import VerifyError, verify
from tkgen.schedule import bulk_copies as BC
from tkgen.schedule import passes as PS
from tkgen.schedule import pipeline as S

from conftest import shipped_catalog

# TileLang's choice of instruction and no pipelined loop, whatever the spec says
ON = {"bulk_copies.max_copies": 8, "bulk_copies.instruction": "", "pipeline_copies.stages": 0}


def _scheduled(name, arch_name, max_copies):
    catalog = shipped_catalog()
    spec = catalog.op(name)
    arch = catalog.archs[arch_name]
    sched = S.resolve(spec, arch)
    sched = {**sched, "pass_params": {**sched.get("pass_params", {}), "bulk_copies": {"max_copies": max_copies}}}
    out = []
    for variant, _, module in generate.naive_modules(catalog, spec):
        out.append((variant, S.apply(module, catalog, arch, sched, verify=True)))
    return out


def _copies(module):
    return [st for k in module.kernels for st in kir.statements(k.body) if isinstance(st, kir.Copy)]


def test_the_pass_is_in_both_pipelines_and_off_by_default():
    assert all("bulk_copies" in [n for n, _ in PS.parse(p)] for p in PS.PIPELINES.values())
    assert PS.registry()["bulk_copies"].params == {"max_copies": (int, 0), "instruction": (str, "")}
    for name in ("rmsnorm_backward", "per_channel_cast"):
        assert not any(_copies(m) for _, m in _scheduled(name, "sm90", 0))


@pytest.mark.parametrize("arch", ["sm90", "cpu"])
def test_rmsnorm_backward_stages_its_row_loads_and_keeps_their_guards(arch):
    """Each [t, h] load (x, grad_out, grad_residual), the [t] rstd and the [h] weight becomes a copy into a
    shared tile of the stored elements; the loop after it reads the staged element under the load's own guard (the rows
    past the tensor's end and the padded columns stay zero). `max_copies` bounds the copies per kernel."""
    for variant, m in _scheduled("rmsnorm_backward", arch, 8):
        copies = _copies(m)
        want = {"x", "grad_out", "rstd"} | {n for n in ("weight", "grad_residual") if variant[f"?{n}"]}
        assert {c.tensor for c in copies} == want, variant
        for c in copies:
            assert c.buf.scope == "shared" and c.buf.dtype == ir.RAW and not c.store and not c.looped
        text = show.module(m)
        assert "copy _t0_bulk[t, h]:@grad_out shared <- x[(b_t * #B_t) + :t, 0 + :h]" in text, text
        loads = [st for k in m.kernels for st in kir.statements(k.body) if isinstance(st, kir.Compute)
                 and any(r.endswith("_bulk") for r in ir.reads(st.value))]
        assert len(loads) == len(copies)
        assert all(isinstance(st.value, ir.Op) and st.value.op == "select" for st in loads
                   if st.dst.axes == ("t", "h")), variant
    one = _scheduled("rmsnorm_backward", arch, 1)
    assert all(len(_copies(m)) == 1 for _, m in one)


def test_per_channel_cast_copies_one_row_group_box_per_row_block():
    """The [[b, r], h] view: the row index is `(b_b * B_b + i_b) * N_r + i_r`, so `r` and `h` make the box and
    the copy runs once per row group `b` of the block."""
    for variant, m in _scheduled("per_channel_cast", "sm90", 8):
        copies = _copies(m)
        assert [c.tensor for c in copies] == ["x"], variant
        (c,) = copies
        assert [a for _, a in c.box] == ["r", "h"] and c.looped == ("b",), variant


def _fetch(*indices):
    return ir.Fetch("x", tuple(indices))


def _local(a):
    return ir.Index(a, True)


def _tile(a):
    return ir.op("add", ir.op("mul", ir.Var(ir.tile_var(a), ir.I32), ir.block(a)), _local(a))


def test_only_a_box_in_the_tiles_order_is_copied():
    assert BC.copy_box(_fetch(_tile("t"), _local("h")), ("t", "h")) == \
        ((ir.op("mul", ir.Var("b_t", ir.I32), ir.block("t")), "t"), (ir.i32(0), "h"))
    assert BC.copy_box(_fetch(_local("h"), _local("t")), ("t", "h")) is None            # transposed
    assert BC.copy_box(_fetch(_tile("t"), ir.i32(3)), ("t", "h")) is None               # h broadcast
    assert BC.copy_box(_fetch(_tile("t"), ir.Read("idx", ir.I32)), ("t", "h")) is None  # a gather
    assert BC.copy_box(_fetch(_tile("t"), ir.op("mul", _local("h"), ir.i32(2))), ("t", "h")) is None  # strided
    assert BC.copy_box(_fetch(ir.op("add", _local("t"), _local("h"))), ("t", "h")) is None  # two lanes, one dim
    # a mixed-radix view: the outer axis is looped
    row = ir.op("add", ir.op("mul", _tile("b"), ir.extent("r")), _local("r"))
    box = BC.copy_box(_fetch(row, _tile("h")), ("b", "r", "h"))
    assert [a for _, a in box] == ["r", "h"] and show.expr(box[0][0]) == "(((b_b * #B_b) + l.b) * #N_r)"


def _module(body):
    axes = {a: kir.Axis(a, ir.extent(a)) for a in ("t", "h")}
    tensors = (kir.TensorArg("x", "input", "bf16", ("T", "H")), kir.TensorArg("out", "output", "bf16", ("T", "H")))
    return kir.Module("toy", "base", axes, tensors, (kir.Kernel("main", tuple(body)),), dims=())


STAGED = kir.Buffer("xs", ("t", "h"), ir.RAW, "shared", elem="bf16")
COPY = kir.Copy("x", ((ir.i32(0), "t"), (ir.i32(0), "h")), STAGED)
BACK = kir.Copy("out", ((ir.i32(0), "t"), (ir.i32(0), "h")), STAGED, store=True)


def test_a_copy_and_a_copy_back_verify_and_show():
    verify(_module([COPY, BACK]))
    assert show.stmt(COPY) == "copy xs[t, h]:bf16 shared <- x[0 + :t, 0 + :h]"
    assert show.stmt(BACK) == "copy xs[t, h]:bf16 shared -> out[0 + :t, 0 + :h]"
    assert kir.own_writes(COPY) == {"xs"} and kir.own_reads(BACK) == {"xs"} and kir.own_reads(COPY) == set()


@pytest.mark.parametrize("body, problem", [
    ([BACK], "'xs' is read before it is written"),
    ([dataclasses.replace(COPY, box=((ir.i32(0), "h"), (ir.i32(0), "t")))], "in another order"),
    ([dataclasses.replace(COPY, box=((ir.i32(0), "t"),))], "indexed with 1 indices"),
    ([dataclasses.replace(COPY, box=((ir.Index("t"), "t"), (ir.i32(0), "h")))], "varies along"),
    ([dataclasses.replace(COPY, buf=dataclasses.replace(STAGED, dtype=ir.F32, elem=None))], "stored elements"),
    ([dataclasses.replace(COPY, box=((ir.i32(0), None), (ir.i32(0), None)))], "names no axis"),
    ([dataclasses.replace(COPY, instruction="dma")], "unknown copy instruction 'dma'"),
])
def test_a_broken_copy_is_rejected(body, problem):
    with pytest.raises(VerifyError, match=problem):
        verify(_module(body))


def _kernels(name, arch, cand, tmp_path):
    from tkgen.tools.bench_cli import candidate_kernels
    cat = shipped_catalog()
    return candidate_kernels(cat, cat.op(name), registry.op_package(name), arch, cand, tmp_path)


def test_the_cuda_kernels_lower_to_bulk_copies_and_build(tmp_path):
    """sm_90a: with the pass on, the staged loads are copied in bulk (TileLang's TMA or cp.async, or 16-byte
    vector loads into shared memory), and the source builds where nvcc is installed."""
    import re
    from tkgen.runtime.compile import lower_source, nvcc_cubin
    for name, variant, args in (("rmsnorm_backward", "with_weight", (7168, 1.0, "bf16")),
                                ("per_channel_cast", "e4m3_fp32_false", (7168, 128, 0.0, "bf16"))):
        src = lower_source(_kernels(name, "sm90", ON, tmp_path), variant, args)
        off = lower_source(_kernels(name, "sm90", {"bulk_copies.max_copies": 0}, tmp_path), variant, args)
        # TileLang 0.1.15 lowers a plain T.copy into shared memory as 16-byte vector loads and stores (TMA
        # only where asked for): each thread moves a uint4 of the tensor into the staging tile
        bulk = re.compile(r"\*\(uint4\*\)\(\(\(bfloat16_t\*\)\w+_bulk\) \+ [^;]*\) = condval;")
        assert bulk.search(src), (name, src[:3000])
        assert not bulk.search(off) and "_bulk" not in off, name
        if shutil.which("nvcc"):
            r = nvcc_cubin(src, "sm_90a")
            assert r.returncode == 0, r.stderr[-2000:]


def test_the_instruction_asked_for_reaches_the_lowered_cuda(tmp_path):
    """`instruction`: per_channel_cast's 128 x 128 box by TMA (a tensor map and an mbarrier), rmsnorm_backward's
    rows by cp.async; both build. A box TMA cannot move (rstd's one float per row: under 16 bytes) is an
    error of TileLang's at compile time, which `tkgen tune` reports as a rejected candidate."""
    from tkgen.runtime.compile import lower_source, nvcc_cubin
    tma = {**ON, "bulk_copies.instruction": "tma"}
    cp_async = {**ON, "bulk_copies.instruction": "cp_async"}
    cases = ((("per_channel_cast", "e4m3_fp32_false", (7168, 128, 0.0, "bf16")), tma, ("tma_load", "CUtensorMap")),
             (("rmsnorm_backward", "with_weight", (7168, 1.0, "bf16")), cp_async, ("cp_async_gs",)))
    for (name, variant, args), cand, marks in cases:
        kernels = _kernels(name, "sm90", cand, tmp_path)
        assert "annotations={'prefer_instruction': " in open(kernels.module.__file__).read()
        src = lower_source(kernels, variant, args)
        assert all(m in src for m in marks), (name, marks)
        if shutil.which("nvcc"):
            r = nvcc_cubin(src, "sm_90a")
            assert r.returncode == 0, r.stderr[-2000:]
    with pytest.raises(Exception, match="could not be honored"):
        lower_source(_kernels("rmsnorm_backward", "sm90", tma, tmp_path), "with_weight", (7168, 1.0, "bf16"))
    with pytest.raises(ValueError, match="instruction 'dma'"):
        _scheduled_with("rmsnorm_backward", "sm90", {"max_copies": 1, "instruction": "dma"})


def _scheduled_with(name, arch_name, params):
    catalog = shipped_catalog()
    spec, arch = catalog.op(name), catalog.archs[arch_name]
    sched = {**S.resolve(spec, arch), "pass_params": {"bulk_copies": params}}
    return [S.apply(m, catalog, arch, sched) for _, _, m in generate.naive_modules(catalog, spec)]


def _inputs(name, rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g).to(torch.bfloat16)
    if name == "per_channel_cast":
        return {"x": x}, {"group_tokens": 32}
    rstd = torch.rand(rows, generator=g) + 0.5
    weight = torch.randn(cols, generator=g).to(torch.bfloat16)
    grad = torch.randn(rows, cols, generator=g).to(torch.bfloat16)
    return {"grad_out": grad, "x": x, "rstd": rstd, "weight": weight}, {}


def _bits(t):
    return t.contiguous().view(torch.uint8)


def _checked(name, kernels, tensors, params, staged):
    """check_tensors on the C target with `kernels` standing in for the op's: the call sites' built
    specializations (kept per shape class, not per kernel module) dropped before and after, and the
    compiled kernel's source checked to be the one asked for (staged or not)."""
    from tkgen.runtime import ops as R
    from tkgen.runtime.fastpath import site_of
    from tkgen.runtime.kernels import substituted
    from tkgen.testing.check import check_tensors
    op = registry.op_package(name).OP
    site_of(op).specializations.clear()
    try:
        with substituted(registry.op_package(name), "cpu", kernels):
            full, _ = R.complete(op, tensors, params)
            kernel, _ = R.kernel_for(op, "cpu", *R.specialization(op, full, params, R.check(op, full, params)))
            assert ("_bulk" in kernel.get_kernel_source()) == staged
            return check_tensors(name, tensors, params, arch="cpu")[0]
    finally:
        site_of(op).specializations.clear()


@pytest.mark.parametrize("name", ["rmsnorm_backward", "per_channel_cast"])
def test_the_c_kernels_with_copies_match_the_reference_and_the_kernels_without(name, tmp_path):
    """On the C target the staged kernels match the reference (outputs poisoned first) and give the same
    bits as the kernels without copies: rows past the end of the last block (and of the last row group),
    columns padded to a power of two."""
    on, off = (_kernels(name, "cpu", c, tmp_path) for c in (ON, {"bulk_copies.max_copies": 0}))
    for rows, cols, seed in ((1, 24, 1), (37, 40, 2), (70, 72, 3)):
        tensors, params = _inputs(name, rows, cols, seed)
        got = _checked(name, on, tensors, params, True)
        want = _checked(name, off, tensors, params, False)
        for a, b in zip(got, want):
            assert torch.equal(_bits(a), _bits(b)), (rows, cols)
    assert "T.copy(" in open(on.module.__file__).read() and "T.copy(" not in open(off.module.__file__).read()


def test_drawn_per_channel_cast_cases_match_with_the_pass_forced_on(tmp_path):
    """The op's own strategy (every scale format, transposed or not, partial row groups, specials) on the
    C target with every load staged: the reference's values, and the bits of the kernels without copies."""
    import importlib
    from hypothesis import given, settings
    from tkgen.testing.inputs import build_inputs
    name = "per_channel_cast"
    on, off = (_kernels(name, "cpu", c, tmp_path) for c in (ON, {"bulk_copies.max_copies": 0}))
    strategies = importlib.import_module(registry.op_package(name).__name__ + ".strategies")

    @settings(max_examples=4, deadline=None)
    @given(strategies.cases())
    def prop(case):
        tensors = build_inputs(case, "cpu")
        got = _checked(name, on, tensors, dict(case["params"]), True)
        want = _checked(name, off, tensors, dict(case["params"]), False)
        assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(got, want))
    prop()


@pytest.mark.parametrize("arch", ["sm90", "cpu"])
def test_every_op_verifies_with_every_load_it_can_stage_staged(arch):
    """The pass forced on for every shipped op (a schedule the profile cannot take aside, as generate
    reports it): each module verifies after every pass, and every copy it makes stages a whole tile's load."""
    from conftest import op_names
    catalog = shipped_catalog()
    staged = 0
    for name in op_names():
        spec = catalog.op(name)
        sched = {**S.resolve(spec, catalog.archs[arch]), "pass_params": {"bulk_copies": {"max_copies": 64}}}
        for _, _, module in generate.naive_modules(catalog, spec):
            try:
                m = S.apply(module, catalog, catalog.archs[arch], sched, verify=True)
            except VerifyError:
                raise
            except ValueError:
                continue
            for c in _copies(m):
                assert not c.store and c.buf.scope == "shared" and c.buf.name.endswith("_bulk")
                staged += 1
    assert staged > 100, staged


def test_per_channel_cast_ships_with_its_box_copied_by_cp_async_on_sm90():
    """Measured on an H200 (2026-12-07, docs/performance.md): 90.2 -> 63.0 us under CUDA graphs at 8192 x 7168,
    bit-identical; the spec turns the pass on for sm90 only (sm100 is unmeasured) and never on the CPU."""
    from tkgen.runtime.kernels import kernel_module
    pkg = registry.op_package("per_channel_cast")
    sources = {arch: open(kernel_module(pkg, arch).module.__file__).read() for arch in ("sm90", "sm100", "cpu")}
    assert "T.copy(" in sources["sm90"] and "'prefer_instruction': 'cp_async'" in sources["sm90"]
    assert "T.copy(" not in sources["sm100"] and "T.copy(" not in sources["cpu"]
