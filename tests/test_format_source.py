"""The line breaker of generated code (tkgen/codegen/format_source.py): every generated module keeps its AST, and
no generated line is longer than 120 characters."""
import ast

import pytest

from tkgen.codegen.format_source import WIDTH, format_source


@pytest.fixture(scope="module")
def unformatted(unformatted_files):
    return unformatted_files


def test_every_generated_module_keeps_its_ast_and_fits_the_width(unformatted):
    """The modules as the printers and templates write them, and as generate writes them: the same tree
    (`ast.dump`), and no line longer than 120 characters; formatting again changes nothing."""
    long = []
    for i, (rel, raw) in enumerate(sorted(unformatted.items())):
        text = format_source(raw)
        assert ast.dump(ast.parse(text)) == ast.dump(ast.parse(raw)), rel
        long += [f"{rel}:{n}: {len(line)}" for n, line in enumerate(text.splitlines(), 1) if len(line) > WIDTH]
        if i % 10 == 0:
            assert format_source(text) == text, rel
    assert not long, long[:10]


def test_a_narrower_width_keeps_the_ast(unformatted):
    """Breaking many more lines (at 60 characters) keeps the tree of the largest kernel module too."""
    files = unformatted
    rel = max((r for r in files if r.name.startswith("kernel_")), key=lambda r: len(files[r]))
    assert ast.dump(ast.parse(format_source(files[rel], 60))) == ast.dump(ast.parse(files[rel]))


@pytest.mark.parametrize("src", [
    "x = f(" + ", ".join(f"a{i}" for i in range(60)) + ")\n",
    "y = (" + " + ".join(f"(b{i} * c{i})" for i in range(30)) + ")\n",
    "d = {" + ", ".join(f"'k{i}': lambda v, w: v[{i}]" for i in range(20)) + "}\n",
    "s = g('" + " ".join(["word"] * 60) + "', r'a\\\\ b " + "z " * 50 + "')\n",
    "from m import " + ", ".join(f"name{i}" for i in range(30)) + "\n",
    "def f(" + ", ".join(f"p{i}=1" for i in range(30)) + "):\n    return -p0 if p1 else p2  # a comment\n",
    "t = {(" + ", ".join(repr("n" * 40 + str(i)) for i in range(3)) + ", '" + "w" * 100 + "'): 1}\n",
    "class A:\n    def g(self):\n        return [x for x in range(3) if x > 0] + ["
    + ", ".join(map(str, range(60))) + "]\n",
    "for i in range(3):\n    if " + " and ".join(f"not with_{i}" for i in range(20)) + ":\n        pass\n"
    + "while " + " or ".join(f"c{i}" for i in range(40)) + ":\n    break\n",
], ids=["call", "sum", "lambdas", "strings", "import", "def", "long-string", "method", "condition"])
def test_long_lines_break_within_the_width_to_the_same_tree(src):
    out = format_source(src)
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(src))
    assert all(len(line) <= WIDTH for line in out.splitlines()), out


def test_what_cannot_break_or_parse_is_left_as_it_is():
    for src in ["x = 'a" + "b" * 200 + "'\n",                 # no space to cut at, not in brackets
                "def f(:\n    " + "x" * 130 + "\n",            # not Python: the audit reports it
                'x = """' + "q " * 80 + '"""\n']:               # a string over lines cannot move
        assert format_source(src) == src
