"""Software-pipelined loops over staged tiles: the pass `pipeline_copies` (tkgen/schedule/pipelined.py), the
loop kind `pipelined` it sets, its verifier rule and its printing (`T.Pipelined` on CUDA, a serial loop on the
C target, whose TileLang pipeline has no software pipelining).

The pass is off by default (no shipped kernel changes) and turned on by `stages`; with `bulk_copies` on, it
pipelines rmsnorm_backward's persistent loop over row tiles. On the C target the kernels with it forced on
match the reference and the kernels without it bit for bit; on CUDA they lower for sm_90a to cp.async groups
committed per stage and waited for, and build with nvcc where it is installed."""
import dataclasses
import shutil

import pytest

from tkgen.codegen import generate
from tkgen.ir import kernel as kir
from tkgen.ir import prim as ir
from tkgen.ir.verify import VerifyError, verify
from tkgen.schedule import passes as PS
from tkgen.schedule import pipeline as S
from tkgen.schedule import pipelined as PL

from conftest import shipped_catalog
from test_bulk_copies import _bits, _checked, _inputs, _kernels

COPIES = {"bulk_copies.max_copies": 8, "pipeline_copies.stages": 0}    # no pipeline, whatever the spec says
PIPELINED = {**COPIES, "pipeline_copies.stages": 2}


def _scheduled(name, arch_name, stages, copies=8):
    catalog = shipped_catalog()
    spec, arch = catalog.op(name), catalog.archs[arch_name]
    sched = S.resolve(spec, arch)
    params = {**sched.get("pass_params", {}), "bulk_copies": {"max_copies": copies},
              "pipeline_copies": {"stages": stages}}
    sched = {**sched, "pass_params": params}
    return [(v, S.apply(m, catalog, arch, sched, verify=True)) for v, _, m in generate.naive_modules(catalog, spec)]


def _loops(module, kind="pipelined"):
    return [st for k in module.kernels for st in kir.statements(k.body) if isinstance(st, kir.Loop) and st.kind == kind]


def test_the_pass_is_in_both_pipelines_after_bulk_copies_and_off_by_default():
    for p in PS.PIPELINES.values():
        names = [n for n, _ in PS.parse(p)]
        assert names.index("bulk_copies") + 1 == names.index("pipeline_copies") < names.index("check_tile_bytes")
    assert PS.registry()["pipeline_copies"].params == {"stages": (int, 0)}
    for stages in (0, 1):
        for _, m in _scheduled("rmsnorm_backward", "sm90", stages):
            assert not _loops(m) and not m.pass_configs
    with pytest.raises(ValueError, match="at least 0"):
        _scheduled("rmsnorm_backward", "sm90", -1)


@pytest.mark.parametrize("arch", ["sm90", "cpu"])
def test_rmsnorm_backward_pipelines_its_loop_over_row_tiles_with_the_copies_first(arch):
    for variant, m in _scheduled("rmsnorm_backward", arch, 3):
        (loop,) = _loops(m)
        assert loop.var == "tile" and loop.stages == 3 and loop.binds, variant
        copies = [st for st in loop.body if isinstance(st, kir.Copy)]
        assert len(copies) >= 3 and all(isinstance(st, kir.Copy) for st in loop.body[:len(copies)]), variant
        # the weight's copy does not depend on the row tile: it stays before the loop, unpipelined
        assert all(c.tensor != "weight" for c in copies)
        assert (m.pass_configs == PL.EXPLICIT_UNROLL) == (arch == "sm90")
    # without copies there is nothing to pipeline
    assert all(not _loops(m) for _, m in _scheduled("rmsnorm_backward", arch, 3, copies=0))


def _module(body, stored="out"):
    axes = {a: kir.Axis(a, ir.extent(a)) for a in ("t", "h")}
    tensors = (kir.TensorArg("x", "input", "bf16", ("T", "H")), kir.TensorArg("out", "output", "bf16", ("T", "H")))
    return kir.Module("toy", "base", axes, tensors, (kir.Kernel("main", tuple(body)),), dims=())


TILE = ir.Var("tile", ir.I32)
XS = kir.Buffer("xs", ("t", "h"), ir.RAW, "shared", elem="bf16")
XF = kir.Buffer("xf", ("t", "h"), ir.F32)
COPY = kir.Copy("x", ((ir.op("mul", TILE, ir.block("t")), "t"), (ir.i32(0), "h")), XS)
LOAD = kir.Compute(XF, ir.Decode("bf16", ir.Read("xs", ir.RAW), ir.F32))
ROW = ir.op("add", ir.op("mul", TILE, ir.block("t")), ir.Index("t", True))
STORE = kir.Store("out", (ROW, ir.Index("h", True)), ir.Encode("bf16", ir.Read("xf", ir.F32)), ("t", "h"))
FILL = kir.Fill(XF, ir.c(0.0))
FIRST = dataclasses.replace(COPY, box=((ir.i32(0), "t"), (ir.i32(0), "h")))      # the first tile, before a loop


def _loop(*body):
    return kir.Loop("tile", ir.extent("t"), tuple(body))


def _run(body, stages=2):
    m = _module(body)
    out = PL.pipeline_copies_pass(m, type("Ctx", (), {"arch": type("A", (), {"backend": "cuda"})})(), stages=stages)
    verify(out, where="pipeline_copies")
    return out.kernels[0].body


def test_a_loop_that_starts_with_its_copy_is_pipelined_and_its_copies_move_to_the_top():
    (loop,) = _run([_loop(COPY, LOAD, STORE)])
    assert loop.kind == "pipelined" and loop.stages == 2 and loop.body == (COPY, LOAD, STORE)
    # a copy after statements that do not touch its buffer or tensor moves up
    (loop,) = _run([FILL, _loop(FILL, COPY, LOAD, STORE)])[1:]
    assert loop.kind == "pipelined" and loop.body == (COPY, FILL, LOAD, STORE)


@pytest.mark.parametrize("body, why", [
    ([_loop(FILL, STORE)], "no copy"),
    # the staged buffer read before the copy: it carries the previous tile's elements into this iteration
    ([FIRST, _loop(LOAD, COPY, STORE)], "carried"),
    # a second writer of the staged buffer
    ([_loop(COPY, LOAD, STORE), FIRST], "another writer"),
    # the loop stores into the tensor it copies from: a copy issued early would read it before the store
    ([_loop(COPY, LOAD, dataclasses.replace(STORE, tensor="x"))], "stored"),
    # a box start that reads a buffer (known only once an earlier statement ran)
    ([kir.Fill(kir.Buffer("o", (), ir.I32, "var"), ir.i32(0)),
      _loop(dataclasses.replace(COPY, box=((ir.Read("o", ir.I32), "t"), (ir.i32(0), "h"))), LOAD, STORE)], "gather"),
    ([_loop(COPY, dataclasses.replace(COPY, buf=dataclasses.replace(XS, name="xt", scope="tile")), LOAD, STORE)],
     "not shared"),
])
def test_a_loop_that_breaks_a_rule_stays_serial(body, why):
    assert all(st.kind != "pipelined" for st in kir.statements(_run(body)) if isinstance(st, kir.Loop)), why


@pytest.mark.parametrize("kind, stages", [("pipelined", 0), ("serial", 2)])
def test_the_verifier_rejects_stages_on_the_wrong_loop(kind, stages):
    with pytest.raises(VerifyError, match="stages"):
        verify(_module([dataclasses.replace(_loop(COPY, LOAD, STORE), kind=kind, stages=stages)]))


def test_the_tile_bytes_count_each_stage_of_a_staged_buffer():
    from tkgen.schedule.tile_bytes import tiles_bytes
    from tkgen.spec import expr as E
    catalog = shipped_catalog()
    arch = catalog.archs["sm90"]
    for stages in (2, 3):
        body = _run([_loop(COPY, LOAD, STORE)], stages)
        m = _module(body)
        total = tiles_bytes(m, m.kernels[0], catalog, arch)
        got = E.evaluate(total, {"N_t": 4, "N_h": 8}, {})
        assert got == 4 * 8 * (2 * stages + 4), stages          # bf16 xs per stage, float32 xf once


def test_the_printers_print_a_pipelined_loop_on_cuda_and_a_serial_one_on_c(tmp_path):
    cuda = open(_kernels("rmsnorm_backward", "sm90", PIPELINED, tmp_path).module.__file__).read()
    assert "for tile in T.Pipelined(" in cuda and "num_stages=2)" in cuda
    c = open(_kernels("rmsnorm_backward", "cpu", PIPELINED, tmp_path).module.__file__).read()
    assert "T.Pipelined" not in c and "for tile in T.serial(" in c


@pytest.mark.parametrize("rows, cols, seed", [(1, 24, 1), (37, 40, 2), (70, 72, 3)])
def test_the_c_kernels_with_the_pass_forced_on_match_the_reference_and_the_kernels_without(rows, cols, seed, tmp_path):
    """rmsnorm_backward on the C target, copies staged and the loop over row tiles pipelined (its copies moved
    to the top): the reference's values, and the bits of the kernels with neither pass."""
    name = "rmsnorm_backward"
    on, off = (_kernels(name, "cpu", c, tmp_path) for c in (PIPELINED, {"bulk_copies.max_copies": 0}))
    tensors, params = _inputs(name, rows, cols, seed)
    got = _checked(name, on, tensors, params, True)
    want = _checked(name, off, tensors, params, False)
    for a, b in zip(got, want):
        assert a.shape == b.shape and _bits(a).equal(_bits(b)), (rows, cols)


def test_the_cuda_kernel_lowers_to_cp_async_stages_and_builds(tmp_path):
    """sm_90a: the pipelined loop over row tiles issues the next tiles' copies as cp.async groups (committed,
    then waited for with a count below the stages), and the source builds where nvcc is installed. The
    knob table carries the pass config the epilogue of a loop with a run-time trip count needs."""
    import re
    from tkgen.runtime.compile import lower_source, nvcc_cubin
    # 8 persistent blocks, not the profile's 132: the explicit unroll also unrolls the weight gradient's loop
    # over the blocks, whose 132 copies took nvcc two minutes; the pipelined loop is the same at any count
    small = {"blocks": 8}
    kernels = _kernels("rmsnorm_backward", "sm90", {**PIPELINED, **small}, tmp_path)
    assert kernels.table.PASS_CONFIGS["tl.UnrollLoop"] == {"explicit_unroll": True}
    src = lower_source(kernels, "with_weight", (7168, 1.0, "bf16"))
    assert "tl::cp_async_gs_conditional<16>" in src and "tl::cp_async_commit();" in src
    waits = {int(n) for n in re.findall(r"tl::cp_async_wait<(\d+)>\(\);", src)}
    assert waits and 0 in waits, waits
    off = lower_source(_kernels("rmsnorm_backward", "sm90", {**COPIES, **small}, tmp_path), "with_weight",
                       (7168, 1.0, "bf16"))
    assert "cp_async" not in off
    if shutil.which("nvcc"):
        r = nvcc_cubin(src, "sm_90a")
        assert r.returncode == 0, r.stderr[-2000:]


def test_every_op_verifies_with_both_passes_forced_on():
    """sm90, every load that can be staged staged and every loop that qualifies pipelined: each module verifies
    after every pass, and each pipelined loop the pass made starts with its copies, whose buffers nothing else
    writes."""
    from conftest import op_names
    catalog = shipped_catalog()
    arch = catalog.archs["sm90"]
    pipelined = 0
    for name in op_names():
        spec = catalog.op(name)
        sched = {**S.resolve(spec, arch), "pass_params": {"bulk_copies": {"max_copies": 64},
                                                          "pipeline_copies": {"stages": 3}}}
        for _, _, module in generate.naive_modules(catalog, spec):
            try:
                m = S.apply(module, catalog, arch, sched, verify=True)
            except VerifyError:
                raise
            except ValueError:
                continue
            for k in m.kernels:
                writers = kir.def_use(k.body).writers
                for loop in _loops(kir.Module("", "", {}, (), (k,), ())):
                    if loop.stages != 3:
                        continue                   # a streamed axis's loop (the pass `stream`: 2 stages)
                    copies = [st for st in loop.body if isinstance(st, kir.Copy)]
                    pipelined += 1
                    assert all(isinstance(st, kir.Copy) for st in loop.body[:len(copies)]), name
                    assert all(writers[c.buf.name] == [c] for c in copies), name
    assert pipelined >= 4, pipelined
