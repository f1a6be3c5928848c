"""The expression language of specs: a tokenizer, a Pratt parser and a constant evaluator.

Spec strings are data. Every expression in a spec (shapes, constraints, compute statements) is parsed here
into a small tree; nothing is ever handed to Python's eval or exec. Names are resolved against the symbols a
spec declares before any code is generated from them.

Grammar (precedence from loose to tight):
    stmt    := targets '=' expr
    targets := NAME (',' NAME)*
    expr    := or ;  or := and ('or' and)* ;  and := not ('and' not)* ;  not := 'not' not | cmp
    cmp     := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
    sum     := prod (('+'|'-') prod)* ;  prod := unary (('*'|'/'|'//'|'%') unary)*
    unary   := '-' unary | atom ;  atom := NUMBER | STRING | NAME | NAME '(' args ')' | '(' expr ')'
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Union


class ExprError(ValueError):
    """A malformed or ill-typed expression; `col` is the 0-based column inside the expression text."""

    def __init__(self, message: str, text: str = "", col: int = 0):
        self.message, self.text, self.col = message, text, col
        where = f" at column {col + 1} of {text!r}" if text else ""
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
    r"|(?P<op>//|==|!=|<=|>=|[-+*/%<>(),=]))"
)
_KEYWORDS = {"and", "or", "not"}
_BINARY_PRECEDENCE = {
    "or": 1, "and": 2,
    "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
    "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6,
}


def _tokenize(text: str):
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


class _Parser:
    def __init__(self, text: str):
        self.text, self.toks, self.i = text, _tokenize(text), 0

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
        lhs = self.prefix()
        while True:
            kind, tok, col = self.peek()
            prec = _BINARY_PRECEDENCE.get(tok) if kind in ("op", "name") else None
            if prec is None or prec <= min_prec:
                return lhs
            self.take()
            rhs = self.expr(prec)
            if prec == 4 and isinstance(lhs, Binary) and _BINARY_PRECEDENCE.get(lhs.op) == 4:
                raise ExprError("comparisons do not chain; use `and`", self.text, col)
            lhs = Binary(tok, lhs, rhs, col)

    def prefix(self) -> Node:
        kind, tok, col = self.take()
        if kind == "num":
            value = int(tok, 16) if tok.lower().startswith("0x") else (
                float(tok) if any(c in tok for c in ".eE") else int(tok))
            return Num(value, col)
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
        return Num(text)
    p = _Parser(str(text))
    node = p.expr()
    p.expect_end()
    return node


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
    return Statement(tuple(targets), value, text)


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


def evaluate(node: Node, env: Mapping[str, object]):
    """Evaluate a constant expression (shapes, constraints, schedule numbers) against known values.

    `/` is exact integer division on integers: a shape like `H / group` that does not divide is an error.
    """
    if isinstance(node, (Num, Str)):
        return node.value
    if isinstance(node, Name):
        if node.id not in env:
            raise ExprError(f"unknown name {node.id!r}")
        return env[node.id]
    if isinstance(node, Unary):
        v = evaluate(node.arg, env)
        return -v if node.op == "-" else (not v)
    if isinstance(node, Binary):
        if node.op == "and":
            return evaluate(node.lhs, env) and evaluate(node.rhs, env)
        if node.op == "or":
            return evaluate(node.lhs, env) or evaluate(node.rhs, env)
        return _CONST_BINARY[node.op](evaluate(node.lhs, env), evaluate(node.rhs, env))
    if isinstance(node, Call):
        fn = _CONST_FUNCS.get(node.fn)
        if fn is None:
            raise ExprError(f"unknown function {node.fn!r} in a constant expression")
        return fn(*(evaluate(a, env) for a in node.args))
    raise TypeError(node)


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
