"""The expression language of specs: a tokenizer, a Pratt parser and a constant evaluator.

Spec strings are data. Every expression in a spec (shapes, constraints, compute statements) is parsed here
into a small tree; nothing is ever handed to Python's eval or exec. Names are resolved against the symbols a
spec declares before any code is generated from them. Parsing is bounded (tkgen/spec/safety.py): at most
MAX_EXPR_CHARS characters, trees at most MAX_EXPR_DEPTH deep (every later walk of a tree recurses), numbers
of at most MAX_NUMBER_CHARS characters, finite and within MAX_INT.

Grammar (precedence from loose to tight):
    stmt    := targets '=' expr
    targets := NAME (',' NAME)*
    expr    := or ;  or := and ('or' and)* ;  and := not ('and' not)* ;  not := 'not' not | cmp
    cmp     := bor (('=='|'!='|'<'|'<='|'>'|'>=') bor)?
    bor     := bxor ('|' bxor)* ;  bxor := band ('^' band)* ;  band := shift ('&' shift)*
    shift   := sum (('<<'|'>>') sum)*
    sum     := prod (('+'|'-') prod)* ;  prod := unary (('*'|'/'|'//'|'%') unary)*
    unary   := '-' unary | atom ;  atom := NUMBER | STRING | NAME | NAME '(' args ')' | '(' expr ')'
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Union

from . import safety


class ExprError(ValueError):
    """A malformed or ill-typed expression; `col` is the 0-based column inside the expression text."""

    def __init__(self, message: str, text: str = "", col: int = 0):
        self.message, self.text, self.col = message, text, col
        where = f" at column {col + 1} of {safety.short(text, 80)}" if text else ""
        super().__init__(message + where)


@dataclass(frozen=True)
class Num:
    value: Union[int, float]
    col: int = 0


@dataclass(frozen=True)
class Str:
    value: str
    col: int = 0


@dataclass(frozen=True)
class Name:
    id: str
    col: int = 0


@dataclass(frozen=True)
class Unary:
    op: str
    arg: "Node"
    col: int = 0


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: "Node"
    rhs: "Node"
    col: int = 0


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple
    col: int = 0


Node = Union[Num, Str, Name, Unary, Binary, Call]


@dataclass(frozen=True)
class Statement:
    targets: tuple
    value: Node
    text: str


_TOKEN = re.compile(
    r"\s*(?:(?P<num>0[xX][0-9a-fA-F]+|\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<str>'[^']*'|\"[^\"]*\")|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>//|==|!=|<=|>=|<<|>>|[-+*/%<>(),=&|^]))"
)
_KEYWORDS = {"and", "or", "not"}
_BINARY_PRECEDENCE = {
    "or": 1, "and": 2,
    "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
    "|": 4.2, "^": 4.4, "&": 4.6, "<<": 4.8, ">>": 4.8,     # as in Python: between comparisons and sums
    "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6,
}
# operators of integer compute only: constant expressions (shapes, sizes, requirements) do not take them
BIT_OPERATORS = frozenset({"|", "^", "&", "<<", ">>"})


def _tokenize(text: str):
    if len(text) > safety.MAX_EXPR_CHARS:
        raise ExprError(f"an expression has at most {safety.MAX_EXPR_CHARS} characters, found {len(text)}")
    pos, out = 0, []
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            col = len(text) - len(text[pos:].lstrip())
            raise ExprError(f"unexpected character {text[col]!r}", text, col)
        kind = m.lastgroup
        tok = m.group(kind)
        out.append((kind, tok, m.start(kind)))
        pos = m.end()
    out.append(("end", "", len(text)))
    return out


def _number(tok: str, text: str, col: int):
    """The value of a number token: bounded in length and magnitude, finite."""
    if len(tok) > safety.MAX_NUMBER_CHARS:
        raise ExprError(f"a number has at most {safety.MAX_NUMBER_CHARS} characters", text, col)
    if tok.lower().startswith("0x"):
        value = int(tok, 16)
    elif any(c in tok for c in ".eE"):
        value = float(tok)
        if not math.isfinite(value):
            raise ExprError(f"{tok} is out of a float's range", text, col)
        return value
    else:
        value = int(tok)
    if value > safety.MAX_INT:
        raise ExprError(f"{tok} is out of range (at most 2**63 - 1)", text, col)
    return value


def depth(node: "Node") -> int:
    """The depth of an expression tree, counted without recursion."""
    best, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in children(n))
    return best


def children(node):
    if isinstance(node, Unary):
        return (node.arg,)
    if isinstance(node, Binary):
        return (node.lhs, node.rhs)
    if isinstance(node, Call):
        return node.args
    return ()


def _bounded(node: "Node", text: str) -> "Node":
    if depth(node) > safety.MAX_EXPR_DEPTH:
        raise ExprError(f"the expression is nested deeper than {safety.MAX_EXPR_DEPTH} levels", text, 0)
    return node


class _Parser:
    def __init__(self, text: str):
        self.text, self.toks, self.i = text, _tokenize(text), 0
        self.nesting = 0

    def nested(self, col):
        """Count one level of parser recursion; the bound keeps it far from Python's recursion limit."""
        self.nesting += 1
        if self.nesting > safety.MAX_EXPR_DEPTH:
            raise ExprError(f"the expression is nested deeper than {safety.MAX_EXPR_DEPTH} levels", self.text, col)

    def peek(self):
        return self.toks[self.i]

    def take(self, value=None):
        kind, tok, col = self.toks[self.i]
        if value is not None and tok != value:
            raise ExprError(f"expected {value!r}, found {tok or 'end of text'!r}", self.text, col)
        self.i += 1
        return kind, tok, col

    def expect_end(self):
        kind, tok, col = self.peek()
        if kind != "end":
            raise ExprError(f"unexpected {tok!r}", self.text, col)

    def expr(self, min_prec=0) -> Node:
        self.nested(self.peek()[2])
        lhs = self.prefix()
        while True:
            kind, tok, col = self.peek()
            prec = _BINARY_PRECEDENCE.get(tok) if kind in ("op", "name") else None
            if prec is None or prec <= min_prec:
                self.nesting -= 1
                return lhs
            self.take()
            rhs = self.expr(prec)
            if prec == 4 and isinstance(lhs, Binary) and _BINARY_PRECEDENCE.get(lhs.op) == 4:
                raise ExprError("comparisons do not chain; use `and`", self.text, col)
            lhs = Binary(tok, lhs, rhs, col)

    def prefix(self) -> Node:
        kind, tok, col = self.take()
        if kind == "num":
            return Num(_number(tok, self.text, col), col)
        if kind == "str":
            return Str(tok[1:-1], col)
        if tok == "-":
            return Unary("-", self.expr(5.5), col)
        if tok == "not":
            return Unary("not", self.expr(3), col)
        if tok == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if kind == "name" and tok not in _KEYWORDS:
            if self.peek()[1] == "(":
                self.take("(")
                args = []
                if self.peek()[1] != ")":
                    args.append(self.expr())
                    while self.peek()[1] == ",":
                        self.take(",")
                        args.append(self.expr())
                self.take(")")
                return Call(tok, tuple(args), col)
            return Name(tok, col)
        raise ExprError(f"unexpected {tok or 'end of text'!r}", self.text, col)


def parse(text) -> Node:
    """Parse one expression. Integers and floats in YAML arrive as numbers and are wrapped as such."""
    if isinstance(text, bool):
        raise ExprError("a boolean is not an expression")
    if isinstance(text, (int, float)):
        if isinstance(text, float) and not math.isfinite(text) or abs(text) > safety.MAX_INT:
            raise ExprError(f"{text!r} is not a finite number within range")
        return Num(text)
    p = _Parser(str(text))
    node = p.expr()
    p.expect_end()
    return _bounded(node, str(text))


def parse_statement(text: str) -> Statement:
    """Parse `a, b = expr` (a compute stage)."""
    if "=" not in text.replace("==", "").replace("!=", "").replace("<=", "").replace(">=", ""):
        raise ExprError("a stage must assign: `name = expression`", text, 0)
    p = _Parser(text)
    targets = []
    while True:
        kind, tok, col = p.take()
        if kind != "name" or tok in _KEYWORDS:
            raise ExprError(f"expected a name to assign, found {tok!r}", text, col)
        targets.append(tok)
        if p.peek()[1] == ",":
            p.take(",")
            continue
        p.take("=")
        break
    value = p.expr()
    p.expect_end()
    return Statement(tuple(targets), _bounded(value, text), text)


def names(node: Node) -> set:
    """Every plain name the expression refers to (function names excluded)."""
    if isinstance(node, Name):
        return {node.id}
    if isinstance(node, Unary):
        return names(node.arg)
    if isinstance(node, Binary):
        return names(node.lhs) | names(node.rhs)
    if isinstance(node, Call):
        out = set()
        for a in node.args:
            out |= names(a)
        return out
    return set()


def _exact_div(a, b):
    if b == 0:
        raise ZeroDivisionError("division by zero")
    if isinstance(a, int) and isinstance(b, int):
        if a % b:
            raise ValueError(f"{a} / {b} is not a whole number")
        return a // b
    return a / b


_CONST_FUNCS: Mapping[str, Callable] = {
    "min": min, "max": max, "abs": abs,
    "ceildiv": lambda a, b: -(-a // b),
    "align": lambda a, b: -(-a // b) * b,
    "log2": lambda a: int(math.log2(a)) if a > 0 and (a & (a - 1)) == 0 else math.log2(a),
    "is_pow2": lambda a: a > 0 and (a & (a - 1)) == 0,
}
_CONST_BINARY: Mapping[str, Callable] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": _exact_div,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def evaluate(node: Node, env: Mapping[str, object], funcs: Optional[Mapping[str, Callable]] = None):
    """Evaluate a constant expression (shapes, constraints, schedule numbers) against known values;
    `funcs`: functions beside the constant ones (the schedule arithmetic of tile sizes).

    `/` is exact integer division on integers: a shape like `H / group` that does not divide is an error.
    """
    if isinstance(node, (Num, Str)):
        return node.value
    if isinstance(node, Name):
        if node.id not in env:
            raise ExprError(f"unknown name {node.id!r}")
        return env[node.id]
    if isinstance(node, Unary):
        v = evaluate(node.arg, env, funcs)
        return -v if node.op == "-" else (not v)
    if isinstance(node, Binary):
        if node.op == "and":
            return evaluate(node.lhs, env, funcs) and evaluate(node.rhs, env, funcs)
        if node.op == "or":
            return evaluate(node.lhs, env, funcs) or evaluate(node.rhs, env, funcs)
        return _CONST_BINARY[node.op](evaluate(node.lhs, env, funcs), evaluate(node.rhs, env, funcs))
    if isinstance(node, Call):
        fn = (funcs or {}).get(node.fn) or _CONST_FUNCS.get(node.fn)
        if fn is None:
            raise ExprError(f"unknown function {node.fn!r} in a constant expression")
        return fn(*(evaluate(a, env, funcs) for a in node.args))
    raise TypeError(node)


_INT_FUNCS = {"min", "max", "abs", "ceildiv", "align", "log2"}
_CMP = {"==", "!=", "<", "<=", ">", ">="}


def constant_kind(node: Node, kinds: Mapping[str, str]) -> str:
    """The type of a constant expression: "int", "float", "bool" or "str"; `kinds` gives each name's type.

    Raises ExprError where operands do not fit (`not 3`, `(H > 1) + 1`, a float in an integer function)."""
    if isinstance(node, Num):
        return "float" if isinstance(node.value, float) else "int"
    if isinstance(node, Str):
        return "str"
    if isinstance(node, Name):
        return kinds.get(node.id, "int")
    if isinstance(node, Unary):
        inner = constant_kind(node.arg, kinds)
        want = "bool" if node.op == "not" else inner if inner in ("int", "float") else None
        if inner != want:
            raise ExprError(f"`{node.op}` needs {'a condition' if node.op == 'not' else 'a number'}, found {inner}",
                            col=node.col)
        return inner
    if isinstance(node, Binary):
        lhs, rhs = constant_kind(node.lhs, kinds), constant_kind(node.rhs, kinds)
        if node.op in ("and", "or"):
            if lhs != "bool" or rhs != "bool":
                raise ExprError(f"`{node.op}` joins conditions, found {lhs} and {rhs}", col=node.col)
            return "bool"
        if node.op in BIT_OPERATORS:
            raise ExprError(f"`{node.op}` is integer compute (compute statements); shapes, sizes and "
                            "requirements do not take it", col=node.col)
        if node.op in ("==", "!=") and lhs == rhs == "str":
            return "bool"                 # a structural param against one of its values: `scale != 'ue8m0'`
        if "str" in (lhs, rhs) or "bool" in (lhs, rhs):
            raise ExprError(f"`{node.op}` compares or computes numbers, found {lhs} and {rhs}", col=node.col)
        if node.op in _CMP:
            return "bool"
        return "float" if "float" in (lhs, rhs) else "int"
    if isinstance(node, Call):
        args = [constant_kind(a, kinds) for a in node.args]
        if node.fn not in _INT_FUNCS and node.fn != "is_pow2":
            raise ExprError(f"unknown function {node.fn!r} in a constant expression", col=node.col)
        if any(a != "int" for a in args):
            raise ExprError(f"{node.fn}() takes integers, found {', '.join(args)}", col=node.col)
        return "bool" if node.fn == "is_pow2" else "int"
    raise TypeError(node)


def zero_divisor(node: Node):
    """The first division (`/`, `//`, `%`, ceildiv, align) whose divisor is a constant zero, or None."""
    stack = [node]
    while stack:
        n = stack.pop()
        divisor = n.rhs if isinstance(n, Binary) and n.op in ("/", "//", "%") else \
            n.args[1] if isinstance(n, Call) and n.fn in ("ceildiv", "align") and len(n.args) == 2 else None
        if divisor is not None and not names(divisor):
            try:
                if evaluate(divisor, {}) == 0:
                    return n
            except (ExprError, ArithmeticError, ValueError, TypeError):
                pass
        stack.extend(children(n))
    return None


def to_source(node: Node) -> str:
    """Print an expression back in spec syntax (fully parenthesised where needed)."""
    if isinstance(node, Num):
        return repr(node.value)
    if isinstance(node, Str):
        return repr(node.value)
    if isinstance(node, Name):
        return node.id
    if isinstance(node, Unary):
        return f"-{_wrap(node.arg)}" if node.op == "-" else f"not {_wrap(node.arg)}"
    if isinstance(node, Binary):
        return f"{_wrap(node.lhs)} {node.op} {_wrap(node.rhs)}"
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(to_source(a) for a in node.args)})"
    raise TypeError(node)


def _wrap(node: Node) -> str:
    s = to_source(node)
    return f"({s})" if isinstance(node, Binary) else s
