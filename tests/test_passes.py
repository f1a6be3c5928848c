"""Schedules as declared passes (tkgen/schedule/passes.py) and the kernel IR's verifier (tkgen/ir/verify.py).

Every shipped op's variants pass the verifier after every pass of every profile's pipeline (about 25 s for
all of them); hand-broken modules are rejected, naming the pass and the statement; pipelines are data that
a profile may replace, checked against the registry."""
import dataclasses

import pytest

from tkgen.codegen import generate
from tkgen.ir import kernel as kir
from tkgen.ir import prim as ir
from tkgen.ir import show
from tkgen.ir.verify import VerifyError, verify
from tkgen.schedule import passes as PS
from tkgen.schedule import pipeline as S

from conftest import op_names, shipped_catalog


def _schedule(name, arch, pipeline=None, trace=None):
    catalog = shipped_catalog()
    spec = catalog.op(name)
    out = []
    for variant, program, module in generate.naive_modules(catalog, spec):
        ctx = PS.Context(catalog, arch, S.resolve(spec, arch))
        try:
            out.append(PS.run(module, ctx, pipeline, verify=True, trace=trace))
        except VerifyError:
            raise
        except ValueError:
            pass            # a schedule this profile cannot take (generate reports it at the spec)
    return out


@pytest.mark.parametrize("name", op_names())
def test_every_variant_verifies_after_every_pass_on_every_profile(name):
    """Every profile, and the CPU profile padding reduced axes as CUDA does (tests/test_padded_tiles.py)."""
    catalog = shipped_catalog()
    padded = dataclasses.replace(catalog.archs["cpu"], name="cpu_padded", pad_reduced=True)
    for arch in list(catalog.archs.values()) + [padded]:
        _schedule(name, arch)


def test_apply_is_the_declared_pipeline_and_the_trace_names_each_pass():
    catalog = shipped_catalog()
    arch = catalog.archs["sm90"]
    trace = PS.Trace()
    _schedule("swiglu_forward", arch, trace=trace)
    names = [n for n, _, _ in trace.steps]
    per_variant = len(PS.PIPELINES["cuda"])
    assert names[:per_variant] == [n for n, _ in PS.parse(PS.PIPELINES["cuda"])]
    assert dict(trace.steps[names.index("stream")][1]) == {"kind": "pipelined", "stages": 2}


def _module(body, tiles=(), axes=("t", "h"), tensors=None):
    tensors = tensors or (kir.TensorArg("x", "input", "fp32", ("T", "H")), kir.TensorArg("out", "output", "fp32", ("T", "H")))
    extents = {"h": ir.i32(8)}            # a number, for the bounds of constant indices
    return kir.Module("toy", "base", {a: kir.Axis(a, extents.get(a, ir.extent(a))) for a in axes}, tuple(tensors),
                      (kir.Kernel("main", tuple(body), tiles=tuple(tiles)),), dims=())


X = kir.Buffer("xv", ("t", "h"), ir.F32)
LOAD = kir.Compute(X, ir.Decode("fp32", ir.Fetch("x", (ir.Index("t"), ir.Index("h"))), ir.F32))
STORE = kir.Store("out", (ir.Index("t"), ir.Index("h")), ir.Encode("fp32", ir.Read("xv", ir.F32)), ("t", "h"))


def test_a_sound_module_verifies():
    verify(_module([LOAD, STORE]), ("guarded",))


@pytest.mark.parametrize("body, tiles, invariants, problem", [
    ([STORE], (), (), "'xv' is read before it is written"),
    ([dataclasses.replace(LOAD, dst=kir.Buffer("xv", ("t", "h"), ir.I32)), STORE], (), (), "f32 written into buffer 'xv'"),
    ([LOAD, dataclasses.replace(STORE, axes=("t", "k"))], (), (), "axis 'k' is not an axis"),
    ([LOAD, dataclasses.replace(STORE, tensor="y")], (), (), "tensor 'y' is not an argument"),
    ([LOAD, dataclasses.replace(STORE, indices=(ir.Index("t"),))], (), (), "indexed with 1 indices"),
    ([LOAD, dataclasses.replace(STORE, indices=(ir.Index("t"), ir.i32(0)))], (), (), "several writers per element"),
    ([LOAD, STORE], (("h", kir.Tile(ir.Size("B_h"), False, True)),), ("guarded",), "without a guard"),
    ([LOAD, dataclasses.replace(STORE, indices=(ir.Index("t"), ir.Var("j", ir.I32)))], (), (), "'j' is not in scope"),
    ([LOAD, dataclasses.replace(STORE, value=ir.Encode("fp32", ir.Read("xv", ir.F32, (ir.Index("t"), ir.i32(-1)))))],
     (), (), "buffer 'xv' indexed at -1"),
    ([LOAD, dataclasses.replace(STORE, value=ir.Encode("fp32", ir.Read("xv", ir.F32, (ir.Index("t"), ir.i32(8)))))],
     (), (), "indexed at 8, outside axis 'h' (extent 8)"),
])
def test_a_broken_module_is_rejected_naming_the_statement(body, tiles, invariants, problem):
    with pytest.raises(VerifyError) as e:
        verify(_module(body, tiles), invariants, where="pass 'toy'")
    assert problem in str(e.value) and "after pass 'toy'" in str(e.value), str(e.value)
    assert e.value.statement is not None and e.value.statement in str(e.value)


def test_the_packets_of_a_padded_axis_are_padded():
    """A packet past the last real one holds only padding: with its axis padded, its tile must be too."""
    module = _module([LOAD, STORE])
    module = module.replace(axes={**module.axes, "p": kir.Axis("p", ir.Size("N_p"), ("h", 2))})
    padded, plain = kir.Tile(ir.Size("B_h"), False, True), kir.Tile(ir.Size("B_p"), False, False)
    guarded = dataclasses.replace(STORE, guard=ir.op("lt", ir.Index("h"), ir.Size("N_h")))
    module = module.replace(kernels=(kir.Kernel("main", (LOAD, guarded), tiles=(("h", padded), ("p", plain))),))
    with pytest.raises(VerifyError, match="'p' packs the padded axis 'h'"):
        verify(module, ("guarded",))
    verify(module.replace(kernels=(dataclasses.replace(module.kernels[0], tiles=(("h", padded), ("p", padded))),)),
           ("guarded",))


def test_a_broken_pass_is_named_with_its_statement():
    """A pass that drops the guards of stores over padded axes is caught right after it runs."""
    @PS.register("drop_store_guards")
    def drop(module, ctx):
        k = module.kernels[0]
        body = [dataclasses.replace(st, guard=None) if isinstance(st, kir.Store) else st for st in k.body]
        return module.replace(kernels=(dataclasses.replace(k, body=tuple(body)),) + module.kernels[1:])
    try:
        catalog = shipped_catalog()
        arch = catalog.archs["sm90"]
        pipeline = list(PS.PIPELINES["cuda"])
        pipeline.insert(pipeline.index("guard_out_of_range") + 1, "drop_store_guards")
        with pytest.raises(VerifyError) as e:
            _schedule("moe_topk_gate_forward", arch, pipeline)
        assert "after pass 'drop_store_guards'" in str(e.value) and "store " in str(e.value), str(e.value)
    finally:
        PS.REGISTRY.pop("drop_store_guards")


def test_a_profile_declares_its_pipeline():
    """A profile's `passes:` replaces its backend's list: without `fuse`, no loop is fused."""
    catalog = shipped_catalog()
    arch = catalog.archs["cpu"]
    without = [p for p in PS.PIPELINES["cpu"] if p != "fuse"]
    fused = _schedule("swiglu_forward", arch)
    unfused = _schedule("swiglu_forward", dataclasses.replace(arch, passes=tuple(without)))
    nests = [any(isinstance(st, kir.Nest) for st in kir.statements(m.kernels[0].body)) for m in (fused[0], unfused[0])]
    assert nests == [True, False]


@pytest.mark.parametrize("entries, problem", [
    (["plan_tiles", "no_such_pass"], "unknown pass 'no_such_pass'"),
    ([{"stream": {"kind": 2}}], "parameter 'kind' must be str"),
    ([{"go_persistent": {"blocks": True}}], "parameter 'blocks' must be int"),
    ([{"fuse": {"width": 2}}], "pass 'fuse' has no parameter 'width'"),
])
def test_a_pipeline_is_checked_against_the_registry(entries, problem):
    with pytest.raises(ValueError, match=problem):
        PS.parse(entries)


def test_a_profile_with_an_unknown_pass_is_reported_at_passes(tmp_path):
    from tkgen import registry
    from tkgen.driver import validate_document
    from tkgen.spec.loader import SpecError, read
    text = (registry.specs_dir() / "archs" / "cpu.yaml").read_text()
    path = tmp_path / "cpu.yaml"
    path.write_text(text + "passes: [plan_tiles, no_such_pass]\n")
    with pytest.raises(SpecError, match="unknown pass 'no_such_pass'"):
        validate_document(read(path), None)


def test_the_text_form_shows_loops_and_guards():
    text = show.module(_module([LOAD, kir.Loop("r", ir.i32(2), (STORE,))]))
    assert "for r in serial range(2):" in text and "  store out[i.t, i.h]" in text


def test_a_pass_parameter_sets_the_tile_budget():
    catalog = shipped_catalog()
    arch = catalog.archs["sm90"]
    pipeline = [{"plan_tiles": {"tile_elems": 1024}} if p == "plan_tiles" else p for p in PS.PIPELINES["cuda"]]
    knobs = dict(_schedule("swiglu_forward", arch, pipeline)[0].knobs)
    assert knobs["tile_elems"] == 1024 != dict(_schedule("swiglu_forward", arch)[0].knobs)["tile_elems"]


def test_the_docs_list_every_pass_of_every_pipeline():
    from tkgen import registry
    docs = (registry.REPO / "docs" / "architecture.md").read_text()
    for backend, entries in PS.PIPELINES.items():
        for name, _ in PS.parse(entries):
            assert f"| `{name}`" in docs, (backend, name)


def test_the_architecture_doc_shows_the_ir_that_show_passes_prints(capsys):
    """docs/architecture.md follows swiglu_forward through every pass with the IR `tkgen show --passes`
    prints: the block must be what it prints today."""
    from pathlib import Path
    from tkgen.tools import cli
    assert cli.main(["show", "swiglu_forward", "--passes", "--arch", "sm90"]) == 0
    printed = capsys.readouterr().out.rstrip("\n")
    doc = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text()
    section = doc.split("### The IR after each pass: `swiglu_forward` on `sm90`", 1)[1]
    block = section.split("```\n", 1)[1].split("\n```", 1)[0]
    assert block == printed


def test_def_use_names_every_read_and_write_once_for_every_pass():
    """One definition of what a statement reads and writes (kir.def_use), which the passes and the verifier
    share: expression reads with their nodes, a reduction's source, a matmul's operands and a partial write's
    own destination as whole-buffer reads; loop bodies included."""
    x = kir.Buffer("x", ("t", "h"), ir.F32)
    m = kir.Buffer("m", ("t",), ir.F32)
    y = kir.Buffer("y", ("t", "h"), ir.F32)
    load = kir.Compute(x, ir.Fetch("x", (ir.Index("t"), ir.Index("h"))))
    red = kir.Reduce(m, x, "h", "max")
    part = kir.Compute(y, ir.Read("m", ir.F32), at=(("h", ir.i32(0)),))
    loop = kir.Loop("r", ir.i32(2), (part,))
    store = kir.Store("y", (ir.Index("t"), ir.Index("h")), ir.Read("y", ir.F32), ("t", "h"))
    du = kir.def_use([load, red, loop, store])
    assert du.writers == {"x": [load], "m": [red], "y": [part]}
    assert du.readers["x"] == [(red, None)]
    assert du.readers["m"] == [(part, ir.Read("m", ir.F32))]
    assert [(st, n) for st, n in du.readers["y"]] == [(part, None), (store, ir.Read("y", ir.F32))]
    assert kir.reads(loop) == {"m", "y"} and kir.writes(loop) == {"y"}
    assert kir.own_reads(loop) == set() and kir.own_writes(red) == {"m"}


def _with_schedule(name, arch_name, layer):
    """The shipped op `name` with `layer` added to its schedule for `arch_name`."""
    catalog = shipped_catalog()
    spec = catalog.op(name)
    sched = {**spec.schedule, arch_name: {**spec.schedule.get(arch_name, {}), **layer}}
    return dataclasses.replace(spec, schedule=sched), catalog.archs[arch_name]


def test_an_op_schedule_sets_pass_parameters_and_later_layers_set_them_one_by_one():
    """`pass_params` in an op's schedule sets parameters of its pipeline's passes (the stream's stages), a
    later layer (tuned data) overrides one parameter and keeps the others."""
    spec, arch = _with_schedule("mhc_pre_norm_fn", "sm90", {"pass_params": {"stream": {"stages": 3}}})
    sched = S.resolve(spec, arch)
    assert dict(PS.pipeline_for(arch, sched))["stream"] == {"kind": "pipelined", "stages": 3}
    tuned = dataclasses.replace(arch, tuned={"mhc_pre_norm_fn": {"pass_params": {"stream": {"kind": "serial"}}}})
    assert dict(PS.pipeline_for(tuned, S.resolve(spec, tuned)))["stream"] == {"kind": "serial", "stages": 3}
    catalog = shipped_catalog()
    _, program, module = generate.naive_modules(catalog, spec)[0]
    loops = [st for st in kir.statements(S.apply(module, catalog, arch, sched).kernels[0].body)
             if isinstance(st, kir.Loop) and st.kind == "pipelined"]
    assert loops and all(st.stages == 3 for st in loops)


def test_an_op_schedule_replaces_its_pipeline():
    """`passes` in an op's schedule replaces the profile's pipeline for that op: without `fuse`, no loop
    of it is fused, while other ops keep the profile's."""
    without = [p for p in PS.PIPELINES["cpu"] if p != "fuse"]
    spec, arch = _with_schedule("swiglu_forward", "cpu", {"passes": without})
    catalog = shipped_catalog()
    _, program, module = generate.naive_modules(catalog, spec)[0]
    unfused = S.apply(module, catalog, arch, S.resolve(spec, arch), verify=True)
    assert not any(isinstance(st, kir.Nest) for st in kir.statements(unfused.kernels[0].body))
    assert [n for n, _ in PS.pipeline_for(arch, S.resolve(catalog.op("swiglu_forward"), arch))].count("fuse") == 1


@pytest.mark.parametrize("layer, problem", [
    ("{passes: [plan_tiles, no_such_pass]}", "unknown pass 'no_such_pass'"),
    ("{pass_params: {place_gemm: {}}}", "pass_params sets pass 'place_gemm', which the pipeline does not run"),
    ("{pass_params: {stream: {stages: two}}}", "parameter 'stages' must be int"),
])
def test_an_op_schedule_with_a_wrong_pipeline_is_reported_at_its_schedule(tmp_path, layer, problem):
    from spec_trees import only_error
    from tkgen import registry
    text = (registry.specs_dir() / "norm" / "rmsnorm_forward.yaml").read_text()
    assert "\n  cpu: {block: {t: 1}}\n" in text
    err = only_error(tmp_path, text.replace("\n  cpu: {block: {t: 1}}\n", f"\n  cpu: {layer}\n"))
    assert problem in str(err) and "schedule" in str(err), err


def _broadcast_module(shapes, writer=None):
    """A per-row tile `flag` (axis t) read by one elementwise loop per shape in `shapes`."""
    flag = kir.Buffer("flag", ("t",), ir.F32)
    write = writer or kir.Compute(flag, ir.c(1.0))
    body = [write] + [kir.Compute(kir.Buffer(f"w{i}", s, ir.F32), ir.Read("flag", ir.F32)) for i, s in enumerate(shapes)]
    return _module(body, axes=("t", "h", "g", "k"))


def _scope_of_flag(module):
    return kir.buffers(module.kernels[0].body)["flag"].scope


def test_a_tile_broadcast_to_loops_of_several_shapes_is_shared_on_fragment_profiles():
    """share_broadcasts: a tile that loops of at least `min_shapes` wider shapes read goes to shared memory
    (TileLang's layout inference searched 34 s for one fragment layout that three loops could use); fewer
    shapes, a tile a reduction writes, `min_shapes: 0` and a profile without fragments leave it alone."""
    catalog = shipped_catalog()
    sm90, cpu = catalog.archs["sm90"], catalog.archs["cpu"]
    three = _broadcast_module([("t", "h"), ("t", "g"), ("t", "k")])
    run = PS.REGISTRY["share_broadcasts"].fn
    assert _scope_of_flag(run(three, PS.Context(catalog, sm90, {}))) == "shared"
    assert _scope_of_flag(run(three, PS.Context(catalog, sm90, {}), min_shapes=4)) == "tile"
    assert _scope_of_flag(run(three, PS.Context(catalog, sm90, {}), min_shapes=0)) == "tile"
    assert _scope_of_flag(run(three, PS.Context(catalog, cpu, {}))) == "tile"
    same = _broadcast_module([("t", "h"), ("t", "h"), ("t", "g")])
    assert _scope_of_flag(run(same, PS.Context(catalog, sm90, {}))) == "tile"
    reduced = kir.Reduce(kir.Buffer("flag", ("t",), ir.F32), X, "h", "max")
    by_reduce = _broadcast_module([("t", "h"), ("t", "g"), ("t", "k")], writer=reduced)
    by_reduce = by_reduce.replace(kernels=(dataclasses.replace(by_reduce.kernels[0],
                                                               body=(LOAD,) + by_reduce.kernels[0].body),))
    assert _scope_of_flag(run(by_reduce, PS.Context(catalog, sm90, {}))) == "tile"


def test_the_gates_row_flag_is_shared_on_cuda_and_a_tile_on_the_cpu():
    catalog = shipped_catalog()
    for arch, scope in (("sm90", "shared"), ("cpu", "tile")):
        flags = {kir.buffers(k.body)["routed"].scope for m in _schedule("moe_topk_gate_forward", catalog.archs[arch])
                 for k in m.kernels if "routed" in kir.buffers(k.body)}
        assert flags == {scope}, (arch, flags)


def test_a_tile_of_index_arithmetic_is_recomputed_where_it_is_read_on_fragment_profiles():
    """recompute_index_values: a tile whose value is a few operations on axis indices and params (a gather's
    index) is computed in the loops that read it, so that TileLang's vectorizer sees an affine index and not a
    fragment load (lowering top2_sum_gate spent seconds proving things about such loads); a tile that reads a
    buffer, one read at explicit indices, one over `max_ops` operations, `max_ops: 0` and a profile without
    fragments keep it."""
    catalog = shipped_catalog()
    sm90, cpu = catalog.archs["sm90"], catalog.archs["cpu"]
    run = PS.registry()["recompute_index_values"].fn
    member = ir.op("add", ir.op("mul", ir.Index("t"), ir.Scalar("per", ir.I32)), ir.Index("h"))
    index = kir.Buffer("member", ("t", "h"), ir.I32)

    def module(value, read=ir.Read("member", ir.I32)):
        use = kir.Compute(kir.Buffer("w", ("t", "h", "g"), ir.I32), ir.op("add", read, ir.Index("g")))
        return _module([kir.Compute(index, value), use], axes=("t", "h", "g", "k"))

    def body(m):
        return m.kernels[0].body
    done = body(run(module(member), PS.Context(catalog, sm90, {})))
    assert "member" not in kir.buffers(done) and len(done) == 1
    assert done[0].value == ir.op("add", member, ir.Index("g"))
    for kept in (run(module(member), PS.Context(catalog, cpu, {})),
                 run(module(member), PS.Context(catalog, sm90, {}), max_ops=0),
                 run(module(member), PS.Context(catalog, sm90, {}), max_ops=1),
                 run(module(ir.op("add", ir.Read("xv", ir.I32), ir.Index("h"))), PS.Context(catalog, sm90, {})),
                 run(module(member, ir.Read("member", ir.I32, (ir.i32(0), ir.Index("h")))),
                     PS.Context(catalog, sm90, {}))):
        assert "member" in kir.buffers(body(kept))
