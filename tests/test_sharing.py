"""The kernel printer binds the subtrees a statement would print more than once (tkgen/ir/sharing.py)."""
from tkgen.codegen.printers import TileLangPrinter
from tkgen.ir import prim as ir
from tkgen.ir.sharing import Bindings, shared_subtrees

X = ir.Read("x", ir.I32)
K = lambda v: ir.Const(v, ir.I32)  # noqa: E731


def _swap_network(x, steps):
    """The shape of reverse_bits: each step uses its operand twice."""
    for s in range(steps):
        x = ir.op("bitor", ir.op("shr", ir.op("bitand", x, K(0x5555)), K(1 << s)),
                  ir.op("shl", ir.op("bitand", x, K(0x3333)), K(1 << s)))
    return x


class _Reads:
    """Prints a tile read as the buffer's first element (the context a kernel printer gives)."""

    @staticmethod
    def node(e, pr):
        return f"{e.buffer}[0]"


def _printed(roots, indices=()):
    """The lets and the statement's expressions as the kernel printer prints them."""
    pr = TileLangPrinter(_Reads())
    pr.bindings = b = Bindings(roots, indices)
    lets = []
    for k, e in enumerate(b.subtrees):
        lets.append(f"_v{k} = {pr(e, named=False)}")
        b.name(k, f"_v{k}")
    return lets, [pr(r) for r in roots]


def test_a_swap_network_prints_each_step_once():
    e = _swap_network(X, 6)
    plain = TileLangPrinter(_Reads())(e)
    assert plain.count("x[0]") == 2 ** 6
    lets, (stmt,) = _printed([e])
    assert len(lets) == 5                     # each step's operand, the first (a read) aside
    assert sum(s.count("x[0]") for s in lets + [stmt]) == 2
    assert len(stmt) + sum(map(len, lets)) < len(plain) / 8


def test_equal_subtrees_built_apart_are_one_binding():
    a = ir.op("mul", ir.op("add", ir.Read("y", ir.F32), ir.c(1.0)), ir.Read("z", ir.F32))
    b = ir.op("mul", ir.op("add", ir.Read("y", ir.F32), ir.c(1.0)), ir.Read("z", ir.F32))
    big = ir.op("exp", ir.op("sub", a, ir.c(2.0)))
    assert a == b and a is not b
    lets, (stmt,) = _printed([ir.op("add", big, ir.op("exp", ir.op("sub", b, ir.c(2.0))))])
    assert lets == ["_v0 = T.exp((((y[0] + T.float32(1.0)) * z[0]) - T.float32(2.0)))"]
    assert stmt == "(_v0 + _v0)"


def test_small_or_single_subtrees_stay_inline():
    small = ir.op("add", X, K(1))
    assert shared_subtrees([ir.op("mul", small, small)]) == []
    big = _swap_network(X, 1)
    assert shared_subtrees([ir.op("add", big, K(3))]) == []


def test_a_subtree_that_may_fault_is_bound_only_where_it_is_evaluated_anyway():
    # a read at a computed index, used twice, but only in one branch of a select: not evaluated otherwise
    at = ir.op("add", ir.Index("m", local=True), K(1))
    gather = ir.op("mul", ir.Read("t", ir.I32, (at,)), ir.op("add", ir.Read("t", ir.I32, (at,)), K(7)))
    cond = ir.op("lt", ir.Index("m", local=True), K(4))
    branch_only = ir.op("select", cond, ir.op("add", gather, gather), K(0))
    assert gather not in shared_subtrees([branch_only])
    # the same, also evaluated outside the select: bound
    assert gather in shared_subtrees([ir.op("add", branch_only, gather)])
    # arithmetic that cannot fault is bound in a branch too
    safe = _swap_network(X, 1)
    assert safe in shared_subtrees([ir.op("select", cond, ir.op("add", safe, safe), K(0))])
    # an integer division by a computed divisor may divide by zero
    div = ir.op("add", ir.op("floordiv", X, ir.Read("d", ir.I32)), ir.op("mul", X, K(3)))
    assert div not in shared_subtrees([ir.op("select", cond, ir.op("add", div, div), K(0))])


def test_guarded_elements_and_indices():
    # what a guard protects is conditional; the guard itself is evaluated
    guard = ir.op("lt", ir.op("add", ir.op("mul", ir.Index("b"), K(4)), ir.Index("r")), ir.Size("T_"))
    idx = ir.op("add", ir.op("mul", ir.Index("b"), K(4)), ir.Index("r"))
    f = ir.Decode("fp32", ir.Fetch("q", (idx,), guard), ir.F32)
    value = ir.op("add", ir.op("mul", f, f), f)
    subs = shared_subtrees([value])
    assert f in subs                           # the whole guarded element is safe to evaluate
    assert idx not in subs                     # indices stay written out (TileLang reads layouts from them)
    # a statement's own indices are never bound either
    assert shared_subtrees([ir.op("add", idx, idx)], indices=[idx]) == []


def test_values_inside_a_choose_case_are_not_bound():
    e = _swap_network(X, 2)
    inner = ir.op("add", e, e)
    ch = ir.Choose("fmt", (("a", inner), ("b", K(0))))
    assert shared_subtrees([ch]) == []
    # the same subtree outside the Choose too: bound, and the case prints it by name
    lets, (stmt,) = _printed([ir.op("add", ch, e)])
    assert len(lets) == 2 and "_v1" in stmt and stmt.count("_v1") == 3
