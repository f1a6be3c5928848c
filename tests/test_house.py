"""The layout of tkgen: packages along the pipeline, each importing only those before it."""
from import_graph import TKGEN, cycle, graph


def _unit(module: str) -> str:
    """The package a module belongs to (tkgen.spec.model -> tkgen.spec), or the top-level module itself."""
    return ".".join(module.split(".")[:2])


def _package_graph():
    """The import graph (imports inside functions included) collapsed to packages and top-level modules."""
    out = {}
    for m, deps in graph(toplevel=False).items():
        out.setdefault(_unit(m), set()).update({_unit(t) for t in deps} - {_unit(m), "tkgen"})
    return out


def test_at_most_eight_modules_at_the_top():
    top = sorted(p.name for p in TKGEN.glob("*.py"))
    assert len(top) <= 8, top


def test_the_runtime_imports_nothing_of_the_generator():
    """A generated package runs with tkgen.runtime alone (and the registry that finds generated code)."""
    units = _package_graph()
    assert units["tkgen.runtime"] <= {"tkgen.registry"}, units["tkgen.runtime"]
    assert units["tkgen.registry"] == set(), units["tkgen.registry"]


def test_the_generator_packages_are_layered():
    """ir, then spec, lower, schedule, codegen, driver, tools: each imports only packages before it (and
    the runtime, which imports none of them)."""
    order = ["tkgen.ir", "tkgen.spec", "tkgen.lower", "tkgen.schedule", "tkgen.codegen", "tkgen.driver",
             "tkgen.tools"]
    units = _package_graph()
    for i, unit in enumerate(order):
        later = set(order[i:]) - {unit}
        assert not units[unit] & later, (unit, units[unit] & later)
    assert units["tkgen.ir"] == set(), units["tkgen.ir"]


def test_no_cycle_between_packages():
    """Collapsed to packages (and top-level modules), the imports form no cycle: nn and compat included
    (compat builds on nn, nn never imports compat)."""
    units = _package_graph()
    assert cycle(units) is None, cycle(units)


def test_the_entry_points_import_no_generator():
    """tkgen.ops, tkgen.nn and tkgen.compat run generated code through the runtime alone."""
    generator = {"tkgen.ir", "tkgen.spec", "tkgen.lower", "tkgen.schedule", "tkgen.codegen", "tkgen.driver",
                 "tkgen.tools"}
    units = _package_graph()
    for unit in ("tkgen.ops", "tkgen.nn", "tkgen.compat", "tkgen.testing"):
        assert not units[unit] & generator, (unit, units[unit] & generator)
