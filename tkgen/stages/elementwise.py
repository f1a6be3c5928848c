"""Elementwise stages: expressions over values (`Map`), their operators, and the functions of the library.

An elementwise expression varies over the union of its operands' axes (operands broadcast). It becomes
primitive IR (tkgen/ir.py), which the kernel and the reference print alike, so they perform the same
operations in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir, kir
from ..ir import I32, op
from .base import Function, Step, Value, expr_work, function

_BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "==": "eq", "!=": "ne", "<": "lt", "<=": "le",
           ">": "gt", ">=": "ge", "and": "and", "or": "or"}


@dataclass(frozen=True)
class Map(Step):
    """A value computed elementwise from other values (`expr` names them as Vars, and axis indices as
    `#axis`)."""

    out: Value
    expr: ir.Expr

    def sources(self):
        return ir.var_names(self.expr)

    def work(self, size, extent):
        return expr_work(self.expr) * size(self.out.axes)

    def lower(self, lw):
        lw.emit(kir.Compute(lw.buffer(self.out), lw.convert(self.expr)))
        if lw.program.keep is not None and self.out.name == lw.program.keep.name:
            lw.keep = lw.read(self.out)


def assign(b, idx, targets, node):
    """`name = expression`: a Map, except that a value over no axes (constants, params, an absent input,
    folded) is inlined where it is used, and a value that folds to another value is another name for it."""
    if len(targets) != 1:
        b.fail(idx, "an elementwise expression produces one value")
    e = ir.fold(b.elementwise(idx, node, set()))
    axes = b.axes_of(e)          # after folding: `a0 > inf or pad` may not vary at all
    name = targets[0]
    if name not in b.spec.outputs and not axes:
        b.constant(idx, name, e)
        return
    v = b.define(idx, name, axes, e.dtype)
    if name not in b.spec.outputs and isinstance(e, ir.Var) and e.name in b.values:
        b.values[name] = b.values[e.name]     # another name for a value: no copy
    else:
        b.add(idx, Map(v, e))


def unary(b, idx, node, a):
    try:
        return op("neg", a) if node.op == "-" else op("not", a)
    except TypeError as e:
        b.fail(idx, f"operator {node.op!r}: {e}", node)


def binary(b, idx, node, lhs, rhs):
    if node.op == "/" and lhs.dtype == I32:
        b.fail(idx, "'/' divides floats; integer values have no division", node)
    try:
        return op(_BINOPS[node.op], lhs, rhs)
    except (TypeError, KeyError) as e:
        b.fail(idx, f"operator {node.op!r}: {e}", node)


# -- functions --------------------------------------------------------------------------------------------
class Operands(Function):
    """A function of its operands' IR: `apply(fn, *operands)` (raising TypeError for operands it does not
    take)."""

    def build(self, b, idx, node, axes):
        return self.apply(node.fn, *b.operands(idx, node.args, axes))


def define(names, arity, apply, doc) -> type:
    """Register an elementwise function of its operands (one class, made here)."""
    cls = type("".join(n.title() for n in names[0].split("_")), (Operands,),
               {"apply": staticmethod(apply), "__doc__": doc})
    return function(*names, arity=arity)(cls)


def _sigmoid(fn, x):
    one = ir.c(1.0)
    return op("div", one, op("add", one, op("exp", op("neg", x))))


define(("max", "min"), 2, lambda fn, x, y: op(fn, x, y), "The larger (smaller) of two values.")
define(("abs",), 1, lambda fn, x: op("max", x, op("neg", x)),
       "Printed as max(x, -x): TileLang's float `abs` does not build on the C target.")
define(("clamp",), 3, lambda fn, x, lo, hi: op("min", op("max", x, lo), hi), "min(max(x, lo), hi).")
define(("where",), 3, lambda fn, c, x, y: op("select", c, x, y), "x where c holds, else y.")
define(("sigmoid",), 1, _sigmoid, "1 / (1 + exp(-x)).")
define(("exp", "log", "sqrt", "rsqrt"), 1, lambda fn, x: op(fn, x),
       "The targets' library functions (mirrored by the reference: tkgen/runtime/torch_prims.py).")
