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
        ctx = PS.Context(spec.resolved(variant), program, catalog, arch, S.resolve(spec, arch))
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
    return kir.Module("toy", "base", {a: kir.Axis(a, ir.Size(f"N_{a}")) for a in axes}, tuple(tensors),
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
