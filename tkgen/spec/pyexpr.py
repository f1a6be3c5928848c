"""Printing constant spec expressions (shapes, extents, block sizes, checks) as Python source.

Generated factories, references, op modules and strategies evaluate sizes in plain Python; this is the one
place that turns a spec expression tree into that source, and the one place that renames spec symbols that
would collide with the names generated modules use.
"""
from __future__ import annotations

from . import expr as E

# names generated modules bind themselves: a dim or param called so is renamed (T -> T_)
RESERVED_IDENTIFIERS = {"T", "tilelang", "kernel", "torch"}
# functions of size expressions, beyond the spec's own (the schedule's block choices)
SIZE_FUNCTIONS = {"min", "max", "ceildiv", "align", "pick_block", "pad_pow2", "bank_pad", "fit_rows", "fit_threads"}


def sym(name: str) -> str:
    """The Python identifier of a spec symbol (dim or param) in generated code."""
    return name + "_" if name in RESERVED_IDENTIFIERS else name


def py_expr(node: E.Node, rename=sym, tl=True) -> str:
    """Print a constant expression as Python over the factory's (or the reference's) names.

    `tl`: the code runs where TileLang is imported as T (kernel factories), so ceildiv of a dynamic size
    stays symbolic; elsewhere (op checks, references, strategies) it is plain integer Python."""
    if isinstance(node, E.Num):
        return repr(node.value)
    if isinstance(node, E.Str):
        return repr(node.value)
    if isinstance(node, E.Name):
        return rename(node.id)
    if isinstance(node, E.Unary):
        inner = py_expr(node.arg, rename, tl)
        return f"(-{inner})" if node.op == "-" else f"(not {inner})"
    if isinstance(node, E.Binary):
        o = "//" if node.op == "/" else node.op    # exact: the model checks divisibility where it matters
        return f"({py_expr(node.lhs, rename, tl)} {o} {py_expr(node.rhs, rename, tl)})"
    if isinstance(node, E.Call):
        args = [py_expr(a, rename, tl) for a in node.args]
        if node.fn == "ceildiv":
            return f"T.ceildiv({args[0]}, {args[1]})" if tl else f"(-(-{args[0]} // {args[1]}))"
        if node.fn == "align":
            return f"(-(-{args[0]} // {args[1]}) * {args[1]})"
        if node.fn in SIZE_FUNCTIONS:
            return f"{node.fn}({', '.join(args)})"
        raise ValueError(f"function {node.fn!r} is not available in shapes and sizes")
    raise TypeError(node)


def name(n: str) -> E.Name:
    return E.Name(n)


def num(v: int) -> E.Num:
    return E.Num(v)


def call(fn: str, *args) -> E.Call:
    return E.Call(fn, tuple(args))


def mul(a, b) -> E.Node:
    if isinstance(b, E.Num) and b.value == 1:
        return a
    return E.Binary("*", a, b)


def ceildiv(a, b) -> E.Node:
    if isinstance(b, E.Num) and b.value == 1:
        return a
    return call("ceildiv", a, b)
