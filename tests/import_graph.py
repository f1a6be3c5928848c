"""tkgen's import graph, read from the source (nothing imported): for the tests of its layout."""
import ast
from pathlib import Path

from tkgen import registry

TKGEN = registry.REPO / "tkgen"


def modules():
    """Every tkgen module by dotted name (a package by its own name), with its file."""
    mods = {}
    for p in TKGEN.rglob("*.py"):
        name = ".".join(p.relative_to(TKGEN.parent).with_suffix("").parts)
        mods[name[:-len(".__init__")] if name.endswith(".__init__") else name] = p
    return mods


def imports(path: Path, module: str, toplevel: bool):
    """The dotted names a file imports: at its top only, or inside functions too."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in (tree.body if toplevel else ast.walk(tree)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def graph(toplevel=True):
    """Each tkgen module's set of the tkgen modules it imports."""
    mods = modules()
    return {m: {t for t in imports(p, m, toplevel) if t in mods and t != m} for m, p in mods.items()}


def cycle(graph):
    """One import cycle of the graph, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                return path[path.index(t):] + [t]
            if t not in state:
                found = visit(t, path + [t])
                if found:
                    return found
        state[m] = "done"
        return None
    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None
