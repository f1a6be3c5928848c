import pytest

from tkgen.spec import expr as E


def test_precedence_and_evaluation():
    assert E.evaluate(E.parse("1 + 2 * 3 - 4 // 3"), {}) == 6
    assert E.evaluate(E.parse("H / group"), {"H": 7168, "group": 128}) == 56
    assert E.evaluate(E.parse("ceildiv(H / g, 4)"), {"H": 96, "g": 32}) == 1
    assert E.evaluate(E.parse("H % group == 0 and H > 0"), {"H": 64, "group": 32}) is True
    assert E.evaluate(E.parse("-(2 - 5)"), {}) == 3


def test_exact_division_is_checked():
    with pytest.raises(ValueError, match="not a whole number"):
        E.evaluate(E.parse("H / g"), {"H": 100, "g": 32})


def test_statement_targets():
    st = E.parse_statement("sf, inv = scale_from_amax(scale, amax, fmt)")
    assert st.targets == ("sf", "inv")
    assert isinstance(st.value, E.Call) and st.value.fn == "scale_from_amax"
    assert E.names(st.value) == {"scale", "amax", "fmt"}


@pytest.mark.parametrize("text, col", [("a + ", 4), ("a $ b", 2), ("f(a,", 4), ("(a", 2)])
def test_errors_carry_the_column(text, col):
    with pytest.raises(E.ExprError) as info:
        E.parse(text)
    assert info.value.col == col


def test_unknown_names_and_functions_are_rejected():
    with pytest.raises(E.ExprError, match="unknown name"):
        E.evaluate(E.parse("x + 1"), {})
    with pytest.raises(E.ExprError, match="unknown function"):
        E.evaluate(E.parse("__import__('os')"), {})


def test_no_python_syntax_leaks_through():
    for text in ("a.b", "a[0]", "lambda: 1", "a if b else c", "x = 1"):
        with pytest.raises(E.ExprError):
            E.parse(text)


def test_fold_keeps_only_identities_true_for_every_float():
    from tkgen.ir import prim as ir
    x, y = ir.Var("x", ir.F32), ir.Var("y", ir.F32)
    inf = ir.c(float("inf"))
    # an infinite clamp: x > inf and x < -inf are false for every x (NaN too), min(x, inf) and max(x, -inf) are x
    assert ir.fold(ir.op("gt", x, inf)) == ir.Const(False, ir.BOOL)
    assert ir.fold(ir.op("lt", x, ir.op("neg", inf))) == ir.Const(False, ir.BOOL)
    assert ir.fold(ir.op("min", ir.op("max", x, ir.op("neg", inf)), inf)) == x
    clamped = ir.op("select", ir.op("or", ir.op("gt", x, inf), ir.op("lt", x, ir.op("neg", inf))), ir.c(0.0), y)
    assert ir.fold(clamped) == y
    # x * 1, x / 1, x + (-0.0) and x - (+0.0) are x for every x, the sign of zero and NaN included
    for e in (ir.op("mul", x, ir.c(1.0)), ir.op("div", x, ir.c(1.0)), ir.op("add", x, ir.c(-0.0)),
              ir.op("add", ir.c(-0.0), x), ir.op("sub", x, ir.c(0.0))):
        assert ir.fold(e) == x
    # nothing else changes: x + 0.0 (-0.0 + 0.0 is +0.0), x - (-0.0), x * 0.0 (NaN, infinities, the sign),
    # x >= inf and comparisons with finite constants stay
    for e in (ir.op("add", x, ir.c(0.0)), ir.op("sub", x, ir.c(-0.0)), ir.op("mul", x, ir.c(0.0)),
              ir.op("ge", x, inf), ir.op("gt", x, ir.c(0.5)), ir.op("min", x, ir.c(0.5))):
        assert ir.fold(e) == e
