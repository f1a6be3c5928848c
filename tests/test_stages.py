"""The stage library: one registry of stage classes, each with its type rule, expansion and lowering; the
docs list every stage; no import cycles in tkgen; what validate accepts, generate lowers (and an error of a
stage's lowering points at the stage)."""
import re

import pytest

from tkgen import registry
from tkgen.lower.stages import FUNCTIONS, STAGES, Step
from tkgen.lower.stages import base as stage_base

from import_graph import cycle, graph
from test_spec_errors import _check

DOCS = (registry.REPO / "docs" / "spec-language.md").read_text()


def test_every_stage_is_one_registered_class():
    assert {"load", "copy", "take", "absmax", "amax", "amin", "sum", "topk", "count", "keep_rows", "join",
            "scale_from_amax"} <= set(STAGES)
    assert {"exp", "where", "max", "round_to", "exponent", "exp2", "min_amax"} <= set(FUNCTIONS)
    for name, cls in {**STAGES, **FUNCTIONS}.items():
        assert name in cls.names and callable(cls().build), name
    # each program step lowers itself, in the module of its stage's family
    steps = [c for c in _subclasses(Step)]
    assert {c.__name__ for c in steps} >= {"Load", "Copy", "Gather", "Map", "Reduce", "TopK", "Count"}
    for c in steps:
        assert c.lower is not Step.lower and c.__module__.startswith("tkgen.lower.stages."), c


def _subclasses(cls):
    for c in cls.__subclasses__():
        yield c
        yield from _subclasses(c)


def test_the_docs_list_every_stage():
    table = DOCS[DOCS.index("## The stage library"):DOCS.index("## Expressions")]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    documented = {w for cell in first_cells for span in re.findall(r"`([^`]*)`", cell)
                  for w in re.findall(r"[a-z_0-9]+", span)}
    missing = sorted((set(STAGES) | set(FUNCTIONS)) - documented)
    assert not missing, f"docs/spec-language.md does not describe {missing}"


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="registered twice"):
        stage_base.function("exp")(type("Again", (stage_base.Function,), {}))


def test_no_import_cycles_in_tkgen():
    """None among module-level imports anywhere in tkgen, and none counting the imports made inside
    functions too."""
    assert cycle(graph()) is None
    lazy = graph(toplevel=False)
    assert cycle({m: deps & set(lazy) for m, deps in lazy.items()}) is None


def test_the_stage_library_depends_on_no_later_stage():
    """Stages build programs and lower them into the kernel IR; they know neither schedules nor printers
    (nor the Lowering class they are handed)."""
    later = {"tkgen.lower.lowering", "tkgen.schedule.pipeline", "tkgen.codegen.print_tilelang", "tkgen.codegen.print_torch", "tkgen.codegen.generate",
             "tkgen.spec.model", "tkgen.codegen.printers"}
    for m, deps in graph(toplevel=False).items():
        if m.startswith("tkgen.lower.stages"):
            assert not deps & later, (m, deps & later)


SWIGLU = (registry.specs_dir() / "fused" / "swiglu_forward.yaml").read_text()


def test_an_error_of_a_lowering_points_at_its_stage(tmp_path, monkeypatch):
    """A step whose lowering fails is reported by validate at the compute statement it comes from."""
    from tkgen.spec.loader import SpecError, read
    from tkgen.driver import load_catalog, validate_document
    from tkgen.lower.stages.rows import Count

    base = load_catalog(registry.specs_dir())

    def broken(self, lw):
        raise ValueError("this count cannot be lowered")
    monkeypatch.setattr(Count, "lower", broken)
    p = tmp_path / "op.yaml"
    p.write_text(SWIGLU)
    with pytest.raises(SpecError) as info:
        validate_document(read(p), base)
    e = info.value
    stage = next(i for i, s in enumerate(SWIGLU.split("compute:")[1].split("\n  - ")[1:]) if "count(" in s)
    assert e.field_path == ("compute", stage) and "cannot be lowered" in e.message
    assert e.line == next(i for i, line in enumerate(SWIGLU.splitlines(), 1) if "clamped_count = join(" in line)


TOPK = (registry.specs_dir() / "moe" / "topk_gate.yaml").read_text()


def test_validate_rejects_what_generate_would_lower_wrongly(tmp_path):
    """Each of these validated before and generated kernels that read out of bounds or combined blocks'
    results wrongly."""
    e = _check(tmp_path, SWIGLU.replace("b0 = take(xf, s, 1)", "b0 = take(xf, s, 2)"))
    assert e.field_path == ("compute", 3) and "axis 's' has 2 indices" in e.message
    text = TOPK.replace("idx = topk(s, e, j)", "idx = topk(s, t, j)")
    e = _check(tmp_path, text)
    assert e.field_path == ("compute", 1) and "runs along the rows" in e.message
    # a stage's argument error points at the argument's column
    line = text.splitlines()[e.line - 1]
    assert line[e.col - 1:].startswith("t, j)"), (line, e.col)


MANY_AXES = """\
op: many_axes
family: demo
doc: Four axes that a schedule would split across blocks, one more than a grid has.
dims:
  T: {dynamic: true, doc: rows}
  A: {doc: a, min: 1, max: 64}
  B: {doc: b, min: 1, max: 64}
  C: {doc: c, min: 1, max: 64}
axes: {t: T, a: A, b: B, c: C}
inputs:
  x: {dtype: fp32, shape: [T, A, B, C], view: [t, a, b, c], values: {specials: [max]}}
outputs:
  y: {dtype: fp32, shape: [T, A, B, C], view: [t, a, b, c]}
compute:
  - y = load(x) * 2
"""


def test_a_schedule_the_kernels_cannot_take_points_at_the_schedule(tmp_path):
    e = _check(tmp_path, MANY_AXES)
    assert e.field_path == ("axes",) and e.line == 9 and "at most three axes" in e.message
    e = _check(tmp_path, MANY_AXES + "schedule:\n  cpu: {block: {t: 1}}\n")
    assert e.field_path == ("schedule", "cpu") and "cpu schedule" in e.message
