"""Break the long lines of generated Python source, token by token, without changing what it means.

Printers emit each statement on one line; this module refills a statement that has a line longer than the
width. It breaks only inside brackets: after a comma, a colon, a keyword's `=` or an opening bracket, or
before a binary operator that follows an operand (within an assignment's target, or before a closing
bracket, only where nothing else fits). Of the places where the line so far fits, it takes the shallowest
(the last of those), so a line breaks at the outermost structure first, and a continuation line is
indented by its bracket depth. A single-quoted string too long for any line is cut at spaces into adjacent
literals, and a long `from ... import a, b` or `if`/`while` condition gets parentheses. Line breaks inside
brackets, adjacent string literals and those parentheses do not reach the AST: the module's `ast.dump` is the same before and after
(tests/test_format_source.py checks every generated module). Source that does not tokenize is returned as
it is, for the audit (tkgen/spec/safety.py) to report.
"""
from __future__ import annotations

import io
import keyword
import re
import tokenize
from dataclasses import dataclass
from typing import List, Optional

WIDTH = 120
INDENT = "    "
_OPEN, _CLOSE = "([{", ")]}"
# binary operators a line may break before
_OPERATORS = frozenset({"or", "and", "if", "else", "|", "^", "&", "<", ">", "<=", ">=", "==", "!=", "<<", ">>",
                        "+", "-", "*", "/", "//", "%", "@", "**"})
_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)     # Python 3.12: f-strings are split into tokens
_MAX_DEPTH_INDENT = 6                  # continuation lines indent at most this many levels deeper
_STRING = re.compile(r"(?i)([rbu]*)('|\")(.*)\2", re.S)


@dataclass
class _Tok:
    type: int
    string: str
    start: tuple
    end: tuple


def format_source(text: str, width: int = WIDTH) -> str:
    """`text` with every statement that has a line longer than `width` broken within its brackets."""
    lines = text.splitlines(keepends=True)
    if all(len(line.rstrip("\r\n")) <= width for line in lines):
        return text
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    # long_before[r]: how many of the first r lines are too long (a statement has one if the count grows)
    long_before = [0]
    for line in lines:
        long_before.append(long_before[-1] + (len(line.rstrip("\r\n")) > width))
    out, row, first = [], 1, None          # row: the next source line (1-based) not yet copied
    skip = (tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.NL, tokenize.COMMENT)
    for k, tok in enumerate(tokens):
        if first is None:
            if tok.type in skip:           # blank and comment-only lines are copied as they are
                continue
            first = k
        if tok.type != tokenize.NEWLINE:
            continue
        start, last = tokens[first].start[0], tok.start[0]
        if long_before[last] > long_before[start - 1]:
            broken = _statement(tokens[first:k + 1], lines[start - 1], width)
            if broken is not None:
                out += lines[row - 1:start - 1]
                out += [line + "\n" for line in broken]
                row = last + 1
        first = None
    out += lines[row - 1:]
    return "".join(out)


def _statement(tokens, first_line: str, width: int) -> Optional[List[str]]:
    """The lines of one statement (its tokens, up to its NEWLINE), or None to leave it as it is."""
    body = [_Tok(t.type, t.string, t.start, t.end) for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE)]
    comment = ""
    if body and body[-1].type == tokenize.COMMENT:
        comment = "  " + body.pop().string
    if any(t.type == tokenize.COMMENT for t in body):
        return None                        # a comment inside a statement: left to whoever wrote it
    if any(t.type == tokenize.STRING and t.start[0] != t.end[0] for t in body):
        return None                        # a string over several lines cannot move
    if any(t.type == _FSTRING_START for t in body):
        return None
    indent = first_line[:len(first_line) - len(first_line.lstrip())]
    lines = _refill(_parenthesize_import(body), indent, width)
    if lines is not None and any(len(line) > width for line in lines):
        # a condition with no bracket to break in (`if a and b and c:`) breaks inside added parentheses
        lines = _refill(_parenthesize_condition(_parenthesize_import(body)), indent, width) or lines
    if lines is None:
        return None
    lines[-1] += comment
    return lines


def _refill(body, indent: str, width: int) -> Optional[List[str]]:
    depth, depths = 0, []                  # the bracket depth before each token
    for t in body:
        if t.type == tokenize.OP and t.string in _CLOSE:
            depth = max(0, depth - 1)
        depths.append(depth)
        if t.type == tokenize.OP and t.string in _OPEN:
            depth += 1
    if depth:
        return None
    body, depths = _split_strings(body, depths, indent, width)
    return _fill(body, depths, indent, width)


def _parenthesize_import(body):
    """`from m import a, b` as `from m import (a, b)`, so that it can break."""
    if not body or body[0].string != "from" or any(t.string in _OPEN for t in body):
        return body
    i = next((k for k, t in enumerate(body) if t.type == tokenize.NAME and t.string == "import"), None)
    if i is None or i + 1 >= len(body) or body[i + 1].string == "*":
        return body
    row, col = body[i].end
    return body[:i + 1] + [_Tok(tokenize.OP, "(", (row, col + 1), (row, col + 2))] + body[i + 1:] + \
        [_Tok(tokenize.OP, ")", body[-1].end, (body[-1].end[0], body[-1].end[1] + 1))]


def _parenthesize_condition(body):
    """`if a and b:` (also `elif`, `while`) as `if (a and b):`, so that the condition can break."""
    if len(body) < 3 or body[0].string not in ("if", "elif", "while") or body[-1].string != ":":
        return body
    (row, col), last = body[0].end, body[-2].end
    opening = _Tok(tokenize.OP, "(", (row, col + 1), (row, col + 2))
    closing = _Tok(tokenize.OP, ")", last, (last[0], last[1] + 1))
    colon = _Tok(tokenize.OP, ":", closing.end, (last[0], last[1] + 2))
    return body[:1] + [opening] + body[1:-1] + [closing, colon]


def _gap(a: _Tok, b: _Tok) -> str:
    """The space between two tokens: as written on one line, else none inside a bracket, else one."""
    if a.end[0] == b.start[0] and b.start[1] >= a.end[1]:
        return " " * (b.start[1] - a.end[1])
    if (a.type == tokenize.OP and a.string in _OPEN) or (b.type == tokenize.OP and b.string in _CLOSE + ","):
        return ""
    return " "


def _operand_end(t: _Tok) -> bool:
    if t.type == tokenize.OP:
        return t.string in _CLOSE
    return t.type in (tokenize.NUMBER, tokenize.STRING) or \
        (t.type == tokenize.NAME and (not keyword.iskeyword(t.string) or t.string in ("None", "True", "False")))


def _breaks(body, depths):
    """The token indices a line may start at: inside brackets, after a comma, a colon, a keyword's `=` or an
    opening bracket (not another one), before a binary operator that follows an operand, between adjacent
    strings; negated, the last resorts: before a closing bracket, and within an assignment's target."""
    out = []
    # the target of an assignment breaks only where nothing else fits
    target = next((i for i, (t, d) in enumerate(zip(body, depths)) if d == 0 and t.string == "="), 0)
    for i in range(1, len(body)):
        if depths[i] == 0 and not (body[i].type == tokenize.OP and body[i].string in _CLOSE):
            continue
        a, b = body[i - 1], body[i]
        if b.type == tokenize.OP and b.string in _CLOSE:
            if a.type == tokenize.OP and a.string in _OPEN:
                continue
            out.append(-i)                 # before a closing bracket: only where nothing else fits
            continue
        if a.type == tokenize.OP and a.string in _OPEN and b.type == tokenize.OP and b.string in _OPEN:
            continue                       # not between opening brackets: no line of a lone `(`
        if (a.type == tokenize.OP and (a.string in (",", ":", "=") or a.string in _OPEN)) or \
                (b.string in _OPERATORS and b.type in (tokenize.OP, tokenize.NAME) and _operand_end(a)) or \
                (a.type == tokenize.STRING and b.type == tokenize.STRING):
            out.append(i if i > target else -i)
    return out


def _fill(body, depths, indent: str, width: int) -> List[str]:
    """Greedy lines: each ends at the shallowest break where it still fits (the last such one); where none
    fits, at the first break."""
    gaps = [0] + [len(_gap(body[i - 1], body[i])) for i in range(1, len(body))]
    every = _breaks(body, depths)
    breaks, last_resort = [b for b in every if b > 0], [-b for b in every if b < 0]
    extra = 1 if body[-1].string == ":" else 0         # a block's header: its continuation past the body
    lines, start, pad = [], 0, indent
    while True:
        length, best, i = len(pad), None, start
        for b in [k for k in breaks if k > start]:
            while i < b:
                length += (gaps[i] if i > start else 0) + len(body[i].string)
                i += 1
            if length > width:
                if best is None:
                    best = b
                break
            if best is None or depths[b] <= depths[best]:
                best = b
        rest = length + sum((gaps[k] if k > start else 0) + len(body[k].string) for k in range(i, len(body)))
        if (best is None or _width(body, gaps, pad, start, best) > width) and rest > width:
            fits = [b for b in last_resort if b > start and _width(body, gaps, pad, start, b) <= width]
            best = fits[-1] if fits else best
        if best is None or rest <= width:
            lines.append(pad + _text(body, start, len(body)))
            return lines
        lines.append(pad + _text(body, start, best))
        start = best
        pad = indent + INDENT * (min(max(depths[best], 1), _MAX_DEPTH_INDENT) + extra)


def _width(body, gaps, pad, a, b) -> int:
    return len(pad) + sum((gaps[k] if k > a else 0) + len(body[k].string) for k in range(a, b))


def _text(body, a, b) -> str:
    return "".join((_gap(body[i - 1], body[i]) if i > a else "") + body[i].string for i in range(a, b))


def _split_strings(body, depths, indent: str, width: int):
    """Single-quoted strings inside brackets too long for a line, cut at spaces into adjacent literals."""
    out, out_depths = [], []
    for t, d in zip(body, depths):
        room = width - len(indent) - len(INDENT) * min(max(d, 1), _MAX_DEPTH_INDENT) - 2
        m = _STRING.fullmatch(t.string) if t.type == tokenize.STRING else None
        if d == 0 or m is None or len(t.string) <= room or "f" in m.group(1).lower() or "\\N" in t.string:
            out.append(t)
            out_depths.append(d)
            continue
        prefix, quote, text = m.groups()
        step = max(20, room - len(prefix) - 2)
        pieces, start = [], 0
        while len(text) - start > step:
            cut = text.rfind(" ", start + 1, start + step)
            while cut > start and text[cut - 1] == "\\":
                cut = text.rfind(" ", start + 1, cut)
            if cut <= start:
                break
            pieces.append(text[start:cut + 1])
            start = cut + 1
        pieces.append(text[start:])
        row, col = t.start
        for k, piece in enumerate(pieces):      # positions one line apart: joined with a space, or broken
            lit = f"{prefix}{quote}{piece}{quote}"
            out.append(_Tok(tokenize.STRING, lit, (row + k, col) if k else t.start, (row + k, col + len(lit))))
            out_depths.append(d)
    return out, out_depths
