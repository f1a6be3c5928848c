"""The layout of tkgen: packages along the pipeline, each importing only those before it."""
import ast
from pathlib import Path

TKGEN = Path(__file__).resolve().parent.parent / "tkgen"


def _modules():
    out = {}
    for p in TKGEN.rglob("*.py"):
        name = ".".join(p.relative_to(TKGEN.parent).with_suffix("").parts)
        out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def _imported(path: Path, module: str):
    """Every tkgen module a file imports, at its top or inside functions."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def _unit(module: str) -> str:
    """The package a module belongs to (tkgen.spec.model -> tkgen.spec), or the top-level module itself."""
    return ".".join(module.split(".")[:2])


def _package_graph():
    mods = _modules()
    graph = {}
    for m, p in mods.items():
        deps = {_unit(t) for t in _imported(p, m) if t in mods}
        graph.setdefault(_unit(m), set()).update(deps - {_unit(m), "tkgen"})
    return graph


def test_at_most_eight_modules_at_the_top():
    top = sorted(p.name for p in TKGEN.glob("*.py"))
    assert len(top) <= 8, top


def test_the_runtime_imports_nothing_of_the_generator():
    """A generated package runs with tkgen.runtime alone (and the registry that finds generated code)."""
    graph = _package_graph()
    assert graph["tkgen.runtime"] <= {"tkgen.registry"}, graph["tkgen.runtime"]
    assert graph["tkgen.registry"] == set(), graph["tkgen.registry"]


def test_the_generator_packages_are_layered():
    """ir, then spec, lower, schedule, codegen, driver, tools: each imports only packages before it (and
    the runtime, which imports none of them)."""
    order = ["tkgen.ir", "tkgen.spec", "tkgen.lower", "tkgen.schedule", "tkgen.codegen", "tkgen.driver",
             "tkgen.tools"]
    graph = _package_graph()
    for i, unit in enumerate(order):
        later = set(order[i:]) - {unit}
        assert not graph[unit] & later, (unit, graph[unit] & later)
    assert graph["tkgen.ir"] == set(), graph["tkgen.ir"]


def test_no_cycle_between_packages():
    """Collapsed to packages (and top-level modules), the imports form no cycle: nn and compat included
    (compat builds on nn, nn never imports compat)."""
    graph = _package_graph()
    state = {}

    def visit(unit, path):
        state[unit] = "open"
        for dep in sorted(graph.get(unit, ())):
            assert state.get(dep) != "open", " -> ".join(path + [dep])
            if dep not in state:
                visit(dep, path + [dep])
        state[unit] = "done"
    for unit in sorted(graph):
        if unit not in state:
            visit(unit, [unit])


def test_the_entry_points_import_no_generator():
    """tkgen.ops, tkgen.nn and tkgen.compat run generated code through the runtime alone."""
    generator = {"tkgen.ir", "tkgen.spec", "tkgen.lower", "tkgen.schedule", "tkgen.codegen", "tkgen.driver",
                 "tkgen.tools"}
    graph = _package_graph()
    for unit in ("tkgen.ops", "tkgen.nn", "tkgen.compat", "tkgen.testing"):
        assert not graph[unit] & generator, (unit, graph[unit] & generator)
