"""One function for variants that differ only in an expression or an index, chosen inside by a Python `if`.

The printers write one function per variant (a kernel factory, a reference). Variants of one op often
differ in a few lines only: a scale rule's expression (fp32 or pow2 scales), the subscript of a store
(row- or column-major scales), a dtype name. This module merges such functions: where every variant has
the same lines but a few simple statements (same count, same block headers, same signature), one function
`make_<fixed params>` takes the params that vary as its first arguments and chooses the differing
statements with an `if` on them. Each variant keeps its name as a specialization of that function
(`build_e4m3_fp32_row = specialize(make_e4m3, 'fp32', 'row')`, tkgen/runtime/schedule.py), so the op, the
runtime, the tuner and the tests still call `build_<variant>` with the arguments they always gave.

Inside a TileLang `@T.prim_func` the `if` is on a Python value, so the parser takes the branch at build
time: the PrimFunc of each variant is the one its own function built. A differing kernel parameter
(the shape of a column-major scale tensor) cannot sit under an `if`; its annotation is chosen before the
prim_func, as `PARAM_<tensor>`.
"""
from __future__ import annotations

import io
import itertools
import re
import tokenize
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from .format_source import WIDTH

PARAM_PREFIX = "PARAM_"
MERGED_PREFIX = "make_"


@dataclass
class Printed:
    """One variant's function as printed: its variant dict, name and lines (`def <name>(...)` first)."""
    variant: dict
    name: str
    lines: List[str]


def arg_name(key: str) -> str:
    """The argument of a merged function that carries a variant key (`?x`, the presence of `x`: `with_x`)."""
    return f"with_{key[1:]}" if key.startswith("?") else key


def _is_header(line: str) -> bool:
    s = line.strip()
    return s.endswith(":") or s.startswith(("@", "def "))


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _signature(fn: Printed) -> str:
    head = fn.lines[0]
    return head[head.index("("):]


def merge(functions: Sequence[Printed], variant_name, prefix: str = MERGED_PREFIX) -> Tuple[List[str], List[str]]:
    """(function sources, alias lines) for `functions`: a function alone as printed, merged functions as
    one `<prefix><fixed params>` each; `alias lines` binds every merged variant's name. `variant_name(dict)`
    names a set of fixed params."""
    groups: Dict[tuple, List[Printed]] = {}
    for fn in functions:
        key = (len(fn.lines), _signature(fn), tuple((i, l) for i, l in enumerate(fn.lines) if i and _is_header(l)))
        groups.setdefault(key, []).append(fn)
    out, aliases, taken = [], [], set()
    merged_of = {}
    for key, members in groups.items():
        if len(members) > 1:
            merged = _merged(members, variant_name, prefix, taken)
            if merged is not None:
                name, lines, binds = merged
                taken.add(name)
                merged_of[id(members[0])] = (lines, [_alias(fn.name, name, args) for fn, args in binds])
                for fn in members[1:]:
                    merged_of[id(fn)] = None
    for fn in functions:                   # in the order of the variants: each function where its first one was
        entry = merged_of.get(id(fn), ())
        if entry is None:
            continue
        if entry:
            out.append("\n".join(entry[0]))
            aliases += entry[1]
        else:
            out.append("\n".join(fn.lines))
    return out, aliases


def _alias(variant_fn: str, merged: str, args: str) -> str:
    line = f"specialize({merged}, {args})"
    # a long name: the value in parentheses, where the line can break (tkgen/codegen/format_source.py)
    return f"{variant_fn} = {line}" if len(variant_fn) + len(line) + 3 <= WIDTH else f"{variant_fn} = ({line})"


def _merged(members: List[Printed], variant_name, prefix, taken):
    """(name, lines, [(function, args source)]) of one function for `members`, or None where that is not
    shorter than the functions it replaces (or an argument would meet a name the functions use)."""
    keys = [k for k in members[0].variant if len({repr(m.variant[k]) for m in members}) > 1]
    fixed = {k: v for k, v in members[0].variant.items() if k not in keys}
    args = [arg_name(k) for k in keys]
    used = {w for m in members for line in m.lines for w in re.findall(r"[A-Za-z_]\w*", line)}
    if len(set(args)) < len(args) or set(args) & used:
        return None
    base = prefix + (variant_name(fixed) if fixed else "variants")
    name = base
    for n in itertools.count(2):
        if name not in taken:
            break
        name = f"{base}_{n}"
    values = [tuple(m.variant[k] for k in keys) for m in members]
    n_lines = len(members[0].lines)
    lines, hoisted, i = [], [], 1
    params = _param_region(members[0].lines)
    signatures = _signature_lines(members[0].lines)
    while i < n_lines:
        texts = [m.lines[i] for m in members]
        if len(set(texts)) == 1:
            lines.append(texts[0])
            i += 1
            continue
        if len({_indent(t) for t in texts}) > 1 or not all(map(_balanced, texts)) or \
                (i in signatures and not params[0] < i < params[1]):
            return None
        # a run of differing lines at one indentation that split the variants the same way
        part = _partition(texts)
        j = i + 1
        while j < n_lines and not (params[0] < i < params[1]) and \
                len({m.lines[j] for m in members}) > 1 and _partition([m.lines[j] for m in members]) == part and \
                len({_indent(m.lines[j]) for m in members} | {_indent(texts[0])}) == 1:
            j += 1
        if params[0] < i < params[1]:      # a kernel parameter: its annotation is chosen before the prim_func
            names = {t.strip().split(":", 1)[0] for t in texts}
            if len(names) > 1:
                # parameters of different names (variants that differ in which optional input is
                # present): the kernels' signatures differ, which no annotation chosen by an `if` can express
                return None
            tensor = names.pop()
            ind = _indent(texts[0])
            branches = [[f"    {PARAM_PREFIX}{tensor} = {m.lines[i].strip().split(':', 1)[1].strip().rstrip(',')}"]
                        for m in _first_of(members, part)]
            hoisted += _chain("    ", keys, values, part, branches)
            lines.append(f"{ind}{tensor}: {PARAM_PREFIX}{tensor},")
        else:
            ind = _indent(texts[0])
            branches = [[m.lines[k] for k in range(i, j)] for m in _first_of(members, part)]
            lines += _chain(ind, keys, values, part, branches)
        i = j
    if hoisted:
        at = _prim_func_line(lines)
        lines[at:at] = hoisted
    head = members[0].lines[0]
    open_at = head.index("(")
    sig = head[open_at + 1:]
    lines.insert(0, f"def {name}({', '.join(args)}{', ' if not sig.startswith(')') else ''}{sig}")
    if len(lines) + len(members) >= n_lines * len(members):
        return None
    binds = [(m, ", ".join(repr(v) for v in vals)) for m, vals in zip(members, values)]
    return name, lines, binds


def _balanced(line: str) -> bool:
    """Whether a line is whole: its brackets close on it (strings aside), so an `if` may hold it."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    depth = 0
    for t in tokens:
        if t.type == tokenize.OP and t.string in "([{":
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _param_region(lines) -> Tuple[int, int]:
    """(index of `def kernel(`, index of its `):`): the lines between are the kernel's parameters."""
    start = next((i for i, l in enumerate(lines) if l.strip() == "def kernel("), -1)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == "):"), -1) if start >= 0 else -1
    return start, end


def _signature_lines(lines) -> set:
    """Indices of the lines inside a `def f(` ... `):` written over several lines."""
    out, inside = set(), False
    for i, line in enumerate(lines):
        if inside and line.strip().startswith(")"):
            inside = False
        elif inside:
            out.add(i)
        elif line.lstrip().startswith("def ") and line.rstrip().endswith("("):
            inside = True
    return out


def _prim_func_line(lines) -> int:
    """Where hoisted annotations go: before the blank line ahead of `@T.prim_func`."""
    at = next(i for i, l in enumerate(lines) if l.strip() == "@T.prim_func")
    return at - 1 if at and not lines[at - 1].strip() else at


def _partition(texts) -> Tuple[int, ...]:
    """For each variant, the index of the first variant with the same text."""
    first = {}
    return tuple(first.setdefault(t, i) for i, t in enumerate(texts))


def _first_of(members, part):
    return [members[i] for i in sorted(set(part))]


def _chain(ind, keys, values, part, branches) -> List[str]:
    """One `if <cond>:` per branch, the conditions exclusive: flat, not `elif` (TileLang's parser makes
    each `if` two nested loops, and Python allows only 20 nested blocks)."""
    out = []
    for first, body in zip(sorted(set(part)), branches):
        chosen = [values[i] for i, p in enumerate(part) if p == first]
        out.append(f"{ind}if {_condition(keys, values, chosen)}:")
        out += ["    " + line for line in body]
    return out


def _condition(keys, values, chosen) -> str:
    """The shortest test on the fewest keys that holds for the `chosen` value tuples, not the others."""
    chosen_set = set(map(repr, chosen))
    for size in range(1, len(keys) + 1):
        for cols in itertools.combinations(range(len(keys)), size):
            inside = {tuple(v[c] for c in cols) for v in values if repr(v) in chosen_set}
            outside = {tuple(v[c] for c in cols) for v in values if repr(v) not in chosen_set}
            if inside & outside:
                continue
            names = [arg_name(keys[c]) for c in cols]
            picks = sorted(inside, key=lambda t: [values.index(v) for v in values
                                                  if tuple(v[c] for c in cols) == t][0])
            if size == 1:
                if len(picks) == 1:
                    return f"{names[0]} == {picks[0][0]!r}"
                return f"{names[0]} in ({', '.join(repr(p[0]) for p in picks)})"
            lhs = "(" + ", ".join(names) + ")"
            if len(picks) == 1:
                return f"{lhs} == {picks[0]!r}"
            return f"{lhs} in ({', '.join(repr(p) for p in picks)})"
    raise AssertionError("distinct variants have distinct keys")
