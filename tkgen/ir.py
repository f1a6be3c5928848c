"""The primitive expression IR that stages and number formats lower to.

A small, typed set of scalar operations (float32 arithmetic, unsigned/signed 32-bit integer arithmetic,
bit casts, selects). Both printers, TileLang and PyTorch, know exactly these operations and nothing else,
so the kernel and the reference are two prints of the same tree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple, Union

F32, U32, I32, BOOL = "f32", "u32", "i32", "bool"
DTYPES = (F32, U32, I32, BOOL)


@dataclass(frozen=True)
class Const:
    value: Union[int, float]
    dtype: str


@dataclass(frozen=True)
class Var:
    """A named value: a tile element, a codec's argument, or a let-bound temporary."""

    name: str
    dtype: str


@dataclass(frozen=True)
class Op:
    op: str
    args: Tuple["Expr", ...]
    dtype: str


@dataclass(frozen=True)
class Call:
    """A call of a generated helper function (a format codec) by name."""

    fn: str
    args: Tuple["Expr", ...]
    dtype: str


Expr = Union[Const, Var, Op, Call]

# op name -> (argument dtypes or None for 'all equal', result dtype or None for 'same as args')
ARITH = {"add", "sub", "mul", "div", "max", "min"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
PREDICATES = {"isnan"}
LOGIC = {"and", "or", "not"}
INT_ONLY = {"shl", "shr", "bitand", "bitor", "bitxor"}
MATH = {"exp", "log", "sqrt", "rsqrt", "neg"}
CASTS = {"bits", "from_bits", "to_i32", "to_u32", "to_f32", "u32_to_i32", "i32_to_u32"}
ALL_OPS = ARITH | COMPARE | PREDICATES | LOGIC | INT_ONLY | MATH | CASTS | {"select"}


def c(value, dtype=F32) -> Const:
    return Const(float(value) if dtype == F32 else int(value), dtype)


def u32(value) -> Const:
    return Const(int(value) & 0xFFFFFFFF, U32)


def _same(args, what):
    dts = {a.dtype for a in args}
    if len(dts) != 1:
        raise TypeError(f"{what}: operands must have one dtype, got {sorted(dts)}")
    return dts.pop()


def op(name: str, *args: Expr) -> Op:
    """Build a typed primitive operation; raises TypeError on a dtype mismatch."""
    if name in ARITH:
        return Op(name, args, _same(args, name))
    if name in COMPARE:
        _same(args, name)
        return Op(name, args, BOOL)
    if name in PREDICATES:
        if args[0].dtype != F32:
            raise TypeError(f"{name}: operand must be f32")
        return Op(name, args, BOOL)
    if name in LOGIC:
        if any(a.dtype != BOOL for a in args):
            raise TypeError(f"{name}: operands must be boolean")
        return Op(name, args, BOOL)
    if name in INT_ONLY:
        dt = _same(args, name)
        if dt not in (U32, I32):
            raise TypeError(f"{name}: operands must be integers, got {dt}")
        return Op(name, args, dt)
    if name in MATH:
        if args[0].dtype != F32 and name != "neg":
            raise TypeError(f"{name}: operand must be f32")
        return Op(name, args, args[0].dtype)
    if name == "select":
        cond, a, b = args
        if cond.dtype != BOOL:
            raise TypeError("select: condition must be boolean")
        return Op(name, args, _same((a, b), "select"))
    casts = {"bits": (F32, U32), "from_bits": (U32, F32), "to_i32": (F32, I32), "to_u32": (F32, U32),
             "to_f32": (None, F32), "u32_to_i32": (U32, I32), "i32_to_u32": (I32, U32)}
    if name in casts:
        src, dst = casts[name]
        if src is not None and args[0].dtype != src:
            raise TypeError(f"{name}: operand must be {src}, got {args[0].dtype}")
        return Op(name, args, dst)
    raise KeyError(f"unknown primitive {name!r}")


_INF = float("inf")
_COMPARE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
            "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def _is(e: Expr, value) -> bool:
    return isinstance(e, Const) and e.value == value and (e.dtype == BOOL) == isinstance(value, bool)


def fold(e: Expr) -> Expr:
    """Simplify a few identities, bottom up: -(constant); a comparison that no float passes (x > +inf,
    x < -inf) or of two constants; min(x, +inf) and max(x, -inf) as x (for a NaN x, fminf would give
    +inf, but kernel and reference are both printed from the folded tree, so they agree); and logic
    and selects on constant conditions. Nothing else changes, so the float32 operations that remain are
    exactly those written. (What an absent optional param, such as an infinite clamp, leaves behind.)"""
    if not isinstance(e, Op):
        return e
    args = tuple(fold(a) for a in e.args)
    o = e.op
    if o == "neg" and isinstance(args[0], Const) and args[0].dtype == F32:
        return Const(-args[0].value, F32)
    if o == "gt" and (_is(args[1], _INF) or _is(args[0], -_INF)):
        return Const(False, BOOL)
    if o == "lt" and (_is(args[1], -_INF) or _is(args[0], _INF)):
        return Const(False, BOOL)
    if o in ("min", "max"):
        neutral = _INF if o == "min" else -_INF
        if _is(args[1], neutral):
            return args[0]
        if _is(args[0], neutral):
            return args[1]
    if o in ("and", "or"):
        absorbing = o == "or"          # True absorbs `or`, False absorbs `and`; the other one is neutral
        for a, b in ((args[0], args[1]), (args[1], args[0])):
            if _is(a, absorbing):
                return Const(absorbing, BOOL)
            if _is(a, not absorbing):
                return b
    if o == "not" and isinstance(args[0], Const):
        return Const(not args[0].value, BOOL)
    if o in COMPARE and all(isinstance(a, Const) for a in args):    # `0 >= 0` of an absent int input
        return Const(bool(_COMPARE[o](args[0].value, args[1].value)), BOOL)
    if o == "select" and isinstance(args[0], Const):
        return args[1] if args[0].value else args[2]
    return Op(o, args, e.dtype)


def children(e: Expr):
    return e.args if isinstance(e, (Op, Call)) else ()


def var_names(e: Expr) -> set:
    """The names of every Var in the expression."""
    out = {e.name} if isinstance(e, Var) else set()
    for a in children(e):
        out |= var_names(a)
    return out


def call_names(e: Expr) -> set:
    """The names of every helper the expression calls."""
    out = {e.fn} if isinstance(e, Call) else set()
    for a in children(e):
        out |= call_names(a)
    return out


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace Vars by name."""
    if isinstance(e, Var):
        return mapping.get(e.name, e)
    if isinstance(e, Op):
        return Op(e.op, tuple(substitute(a, mapping) for a in e.args), e.dtype)
    if isinstance(e, Call):
        return Call(e.fn, tuple(substitute(a, mapping) for a in e.args), e.dtype)
    return e


@dataclass(frozen=True)
class Function:
    """A generated helper: straight-line let-bindings and a result (a format encoder or decoder)."""

    name: str
    params: Tuple[Var, ...]
    lets: Tuple[Tuple[str, Expr], ...]
    result: Expr
    doc: str = ""
    # TileLang: a T.macro, so that each let is bound once (a let statement) instead of its expression
    # being repeated at every use; large repeated trees made CUDA lowering of the encoders take minutes.
    # Only for helpers whose argument may be evaluated unconditionally (encoders: their argument is a
    # computed value, and their result is stored under the store's own guard).
    macro: bool = False

    @property
    def dtype(self):
        return self.result.dtype


class Builder:
    """Collects let-bindings while a helper is built, so that shared subexpressions are computed once."""

    def __init__(self):
        self.lets = []

    def let(self, name: str, e: Expr) -> Var:
        self.lets.append((name, e))
        return Var(name, e.dtype)
