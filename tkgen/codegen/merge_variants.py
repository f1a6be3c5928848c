"""One function for variants that differ in an expression, an index or whole statements, chosen inside by a Python `if`.

The printers write one function per variant (a kernel factory, a reference). Variants of one op often
differ in a few statements only: a scale rule's expression (fp32 or pow2 scales), the subscript of a store
(row- or column-major scales), a dtype name, or steps one variant has and another has not (the packing of
ue8m0 scales, an optional input's load). This module merges such functions: where variants have the same
signature, one function `make_<fixed params>` takes the params that vary as its first arguments; its statements are the variants' statements aligned block by block
(difflib over each block's statements, the bodies of blocks of one header aligned in turn), and a run of
statements that not every variant has sits in an `if` on those params. Each variant keeps its name as a
specialization of that function (`build_e4m3_fp32_row = specialize(make_e4m3, 'fp32', 'row')`,
tkgen/runtime/schedule.py), so the op, the runtime, the tuner and the tests still call `build_<variant>`
with the arguments they always gave.

Inside a TileLang `@T.prim_func` the `if` is on a Python value, so the parser takes the branch at build
time: the PrimFunc of each variant is the one its own function built (a name bound in the `if`, a buffer,
is seen after it as it was without it). A differing kernel parameter (the shape of a column-major scale tensor) cannot sit under an `if`; its
annotation is chosen before the prim_func, as `PARAM_<tensor>`. Kernels whose parameters differ in name
(an optional input present or absent) share one prim_func that lists every variant's parameters: one a
variant lacks is annotated `None` for it (`mask: T.Tensor((T_,), 'int32') if with_mask else None`), which
TileLang's prim_func binds as that Python value, not as a kernel parameter, so each variant's kernel has
the parameters it had, in its order; the statements that read it are in an `if` on its presence.
"""
from __future__ import annotations

import ast
import difflib
import functools
import io
import itertools
import math
import re
import tokenize
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .format_source import WIDTH

PARAM_PREFIX = "PARAM_"
MERGED_PREFIX = "make_"
_CLAUSES = ("else:", "elif ", "except", "finally:")


@dataclass
class Printed:
    """One variant's function as printed: its variant dict, name and lines (`def <name>(...)` first)."""
    variant: dict
    name: str
    lines: List[str]


def arg_name(key: str) -> str:
    """The argument of a merged function that carries a variant key (`?x`, the presence of `x`: `with_x`)."""
    return f"with_{key[1:]}" if key.startswith("?") else key


@dataclass
class _Node:
    """A statement: its own lines (a block's header, decorators first) and, for a block, its statements.
    `members`: the variants that have it; `own`: each member's lines, where they may differ (a kernel's
    header whose annotations differ)."""
    lines: List[str]
    body: Optional[List["_Node"]]
    members: set = field(default_factory=set)
    own: Dict[int, List[str]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        if _is_kernel(self.lines):      # kernels match: their parameters and annotations may differ
            return "\n".join(l for l in self.lines if l.lstrip().startswith("@")) + "kernel"
        return "\n".join(self.lines)

    def all_lines(self) -> List[str]:
        return self.lines + [l for n in self.body or () for l in n.all_lines()]


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


@functools.lru_cache(maxsize=1 << 16)
def _balanced(line: str) -> bool:
    """Whether a line is whole: its brackets close on it (strings aside)."""
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


def _statements(lines: Sequence[str]) -> List[List[str]]:
    """The lines grouped into logical lines (a statement over several lines, a signature), decorators
    joined to what they decorate."""
    out, cur = [], []
    for line in lines:
        cur.append(line)
        if line.strip() and not _balanced("\n".join(l.strip() for l in cur)):
            continue
        if out and out[-1][-1].lstrip().startswith("@"):
            out[-1] += cur
        else:
            out.append(cur)
        cur = []
    if cur:
        raise ValueError("unbalanced brackets")
    return out


def _tree(lines: Sequence[str], member: int) -> List[_Node]:
    """The statements of `lines` as blocks nested by indentation. A blank line sits at the level of the
    statement after it; an `else:` (`elif`, `except`, `finally`) and its body join the block before it,
    which is then matched as one piece."""
    root: List[_Node] = []
    stack: List[Tuple[int, List[_Node]]] = [(-1, root)]
    stmts = _statements(lines)
    for k, stmt in enumerate(stmts):
        text = stmt[-1].strip()
        nxt = next((s for s in stmts[k:] if s[0].strip()), None)
        depth = len(_indent(stmt[0] if stmt[0].strip() else (nxt or stmt)[0]))
        while stack[-1][0] >= depth:
            stack.pop()
        siblings = stack[-1][1]
        if stmt[0].strip().startswith(_CLAUSES) and siblings:
            # `else:` and the rest of its statement join the block before it: one piece, its lines as they are
            node = siblings[-1]
            node.lines, node.body = node.all_lines() + list(stmt), None
            stack.append((depth, _Flat(node)))
            continue
        node = _Node(list(stmt), [] if text.endswith(":") else None, {member})
        siblings.append(node)
        if node.body is not None:
            stack.append((depth, node.body))
    return root


class _Flat(list):
    """The rest of a statement joined whole to its node (after an `else:`): lines appended, not parsed."""
    def __init__(self, node):
        super().__init__()
        self.node = node

    def append(self, child):
        self.node.lines += child.lines
        child.body = None                   # a block's own body comes next: flat as well


def _is_kernel(lines) -> bool:
    head = next((l for l in lines if not l.lstrip().startswith("@")), "")
    return head.strip().startswith("def kernel(") and any(l.strip().startswith("@T.") for l in lines)


def _params(lines) -> Tuple[str, ...]:
    """A kernel header's parameter names (one a line, between `def kernel(` and `):`)."""
    at = next(i for i, l in enumerate(lines) if l.strip().startswith("def kernel("))
    return tuple(l.strip().split(":", 1)[0] for l in lines[at + 1:-1])


def _kernel_params(nodes) -> Optional[tuple]:
    for n in nodes:
        if _is_kernel(n.lines):
            return _params(n.lines)
        if n.body:
            found = _kernel_params(n.body)
            if found is not None:
                return found
    return None


def _align(merged: List[_Node], new: List[_Node]) -> List[_Node]:
    """`merged` (the statements of the variants so far) with the statements `new` of others: statements of
    one text (blocks of one header) are shared and their bodies aligned in turn; the others kept, each
    with the variants that have it, in both sides' order."""
    out = []
    matcher = difflib.SequenceMatcher(None, [n.key for n in merged], [n.key for n in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            out += merged[i1:i2] + new[j1:j2]
            continue
        for a, b in zip(merged[i1:i2], new[j1:j2]):
            _join(a, b)
            out.append(a)
    return out


def _join(a: _Node, b: _Node):
    """`b` into `a`, a statement of the same key."""
    a.own.update({m: b.own.get(m, b.lines) for m in b.members} if a.lines != b.lines else b.own)
    a.members |= b.members
    if a.body is not None:
        a.body = _align(a.body, b.body)


def _fold(nodes: List[_Node]) -> List[_Node]:
    """One statement for two of one key that the alignment left apart (their variants disjoint), where one
    can move to the other past no statement of its variants: no variant's order of statements changes."""
    changed = True
    while changed:
        changed = False
        for j, b in enumerate(nodes):
            for i, a in enumerate(nodes[:j]):
                if a.key != b.key or a.members & b.members:
                    continue
                between = nodes[i + 1:j]
                if not any(n.members & b.members for n in between):
                    _join(a, b)
                    del nodes[j]
                elif not any(n.members & a.members for n in between):
                    _join(b, a)
                    del nodes[i]
                else:
                    continue
                changed = True
                break
            if changed:
                break
    for n in nodes:
        if n.body:
            n.body = _fold(n.body)
    return nodes


class _Emitter:
    """The merged function's lines: a run of statements that not every variant of the block has, in an `if`."""
    def __init__(self, keys, values):
        self.keys, self.values = keys, values

    def block(self, nodes: List[_Node], context: frozenset, add: str) -> List[str]:
        """The lines of `nodes` within a block every variant of `context` enters; `add`: the extra indentation
        of the `if`s around."""
        out = []
        for members, run in itertools.groupby(nodes, key=lambda n: frozenset(n.members)):
            run = list(run)
            if members == context or all(_trivia(n) for n in run):
                for n in run:
                    out += self.node(n, members if members == context else context, add)
                continue
            while _trivia(run[0]):
                run.pop(0)
            while _trivia(run[-1]):
                run.pop()
            chosen = [self.values[i] for i in sorted(members)]
            within = [self.values[i] for i in sorted(context)]
            out.append(f"{add}{_indent(run[0].lines[0])}if {_condition(self.keys, within, chosen)}:")
            for n in run:
                out += self.node(n, members, add + "    ")
        return out

    def node(self, n: _Node, context, add) -> List[str]:
        head, hoisted = n.lines, []
        if n.own:                        # a kernel header: the parameters that differ are chosen before it
            head, hoisted = self.kernel_head(n, add)
        out = hoisted + [add + l if l.strip() else "" for l in head]
        if n.body is not None:
            out += self.block(n.body, context, add)
        return out

    def kernel_head(self, n: _Node, add) -> Tuple[List[str], List[str]]:
        """(header, lines before it) of a kernel whose variants' parameters differ: every parameter of any
        variant in one list. A parameter some variants lack is annotated `None` for them (TileLang's
        prim_func binds it to that Python value, not to a kernel parameter, so the kernel of each variant
        has the parameters it had); one whose annotation differs is annotated `PARAM_<name>`, chosen in
        `if`s before the kernel."""
        own = {i: n.own.get(i, n.lines) for i in sorted(n.members)}
        at = next(k for k, l in enumerate(n.lines) if l.strip().startswith("def kernel("))
        params = {}
        for i, lines in own.items():
            if lines[:at + 1] != n.lines[:at + 1] or lines[-1] != n.lines[-1]:
                raise _Apart("kernel headers differ outside the parameters")
            params[i] = {l.strip().split(":", 1)[0]: l for l in lines[at + 1:-1]}
        within = [self.values[i] for i in own]
        indent = _indent(n.lines[at + 1]) if at + 2 < len(n.lines) else _indent(n.lines[at]) + "    "
        head, hoisted = list(n.lines[:at + 1]), []
        for name in _union([list(p) for p in params.values()]):
            texts = {i: params[i].get(name) for i in own}
            present = dict.fromkeys(t for t in texts.values() if t is not None)
            if len(set(texts.values())) == 1:
                head.append(next(iter(present)))
                continue
            if len(present) == 1:               # present or absent: `x: T.Tensor(...) if with_x else None`
                chosen = [self.values[i] for i in own if texts[i] is not None]
                flag = self.keys.index(f"?{name}") if f"?{name}" in self.keys else None
                if flag is not None and all(self.values[i][flag] == (texts[i] is not None) for i in own):
                    cond = arg_name(f"?{name}")     # the input's own presence, where that tells
                else:
                    cond = _condition(self.keys, within, chosen)
                head.append(f"{indent}{name}: {_annotation(next(iter(present)))} if {cond} else None,")
                continue
            head.append(f"{indent}{name}: {PARAM_PREFIX}{name},")
            for text in dict.fromkeys(texts.values()):
                chosen = [self.values[i] for i in own if texts[i] == text]
                annotation = "None" if text is None else _annotation(text)
                hoisted += [f"{add}{_indent(n.lines[0])}if {_condition(self.keys, within, chosen)}:",
                            f"{add}{_indent(n.lines[0])}    {PARAM_PREFIX}{name} = {annotation}"]
        return head + [n.lines[-1]], hoisted


class _Apart(Exception):
    """Variants that cannot share one function."""


def _annotation(param_line: str) -> str:
    return param_line.strip().split(":", 1)[1].strip().rstrip(",")


def _union(orders: List[List[str]]) -> List[str]:
    """The names of every list in one order that keeps each list's order (at a choice, the name seen
    first); `_Apart` where the lists order two names both ways."""
    first = list(dict.fromkeys(x for order in orders for x in order))
    after = {x: set() for x in first}
    for order in orders:
        for a, b in zip(order, order[1:]):
            after[b].add(a)
    out = []
    while len(out) < len(first):
        ready = next((x for x in first if x not in out and after[x] <= set(out)), None)
        if ready is None:
            raise _Apart("parameters in two orders")
        out.append(ready)
    return out


def _trivia(n: _Node) -> bool:
    return n.body is None and all(not l.strip() or l.strip().startswith("#") for l in n.lines)


def _group_key(fn: Printed):
    """What functions that may share one have in common: the signature; and, tried where those do not
    share one, the kernel's parameter names."""
    try:
        tree = _tree(fn.lines, 0)
    except ValueError:
        return None
    head = "\n".join(tree[0].lines)
    return head[head.index("("):], _kernel_params(tree)


def merge(functions: Sequence[Printed], variant_name, prefix: str = MERGED_PREFIX) -> Tuple[List[str], List[str]]:
    """(function sources, alias lines) for `functions`: a function alone as printed, merged functions as
    one `<prefix><fixed params>` each; `alias lines` binds every merged variant's name. `variant_name(dict)`
    names a set of fixed params. Functions of one signature (and kernel parameters) are merged; where that
    does not pay or cannot be (an argument would meet a name), those of one shape (line count and block
    headers) are tried."""
    groups: Dict[tuple, Dict[tuple, List[Printed]]] = {}      # signature: kernel parameters: functions
    for fn in functions:
        signature, params = _group_key(fn) or ((None, id(fn)), None)
        groups.setdefault(signature, {}).setdefault(params, []).append(fn)
    out, aliases, taken = [], [], set()
    merged_of = {}

    def take(members):
        merged = _merged(members, variant_name, prefix, taken) if len(members) > 1 else None
        if merged is None:
            return False
        name, lines, binds = merged
        taken.add(name)
        merged_of[id(members[0])] = (lines, [_alias(fn.name, name, args) for fn, args in binds])
        for fn in members[1:]:
            merged_of[id(fn)] = None
        return True

    for by_params in groups.values():
        ids = {id(fn) for members in by_params.values() for fn in members}
        if len(by_params) > 1 and take([fn for fn in functions if id(fn) in ids]):
            continue
        for members in by_params.values():
            if take(members):
                continue
            shapes: Dict[tuple, List[Printed]] = {}
            for fn in members:
                shapes.setdefault((len(fn.lines), tuple((i, l) for i, l in enumerate(fn.lines) if i and
                                                        _is_header(l))), []).append(fn)
            for same in shapes.values():
                take(same)
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


def _is_header(line: str) -> bool:
    s = line.strip()
    return s.endswith(":") or s.startswith(("@", "def "))


def _alias(variant_fn: str, merged: str, args: str) -> str:
    line = f"specialize({merged}, {args})"
    # a long name: the value in parentheses, where the line can break (tkgen/codegen/format_source.py)
    return f"{variant_fn} = {line}" if len(variant_fn) + len(line) + 3 <= WIDTH else f"{variant_fn} = ({line})"


def _merged(members: List[Printed], variant_name, prefix, taken):
    """(name, lines, [(function, args source)]) of one function for `members`, or None where that is not
    shorter than the functions it replaces or an argument would meet a name the functions use."""
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
    trees = [_tree([fn.lines[0].replace(f"def {fn.name}(", "def _(", 1), *fn.lines[1:]], m)
             for m, fn in enumerate(members)]
    tree = trees[0]
    for other in trees[1:]:
        tree = _align(tree, other)
    tree = _fold(tree)
    root = tree[0]
    if len(tree) != 1 or root.own or len(root.members) != len(members):
        return None
    try:
        body = _Emitter(keys, values).block(root.body, frozenset(range(len(members))), "")
    except _Apart:
        return None
    head = root.lines[0]
    sig = head[head.index("(") + 1:]
    lines = [f"def {name}({', '.join(args)}{', ' if not sig.startswith(')') else ''}{sig}", *root.lines[1:], *body]
    if len(lines) + len(members) >= sum(len(m.lines) for m in members):
        return None
    binds = [(m, ", ".join(repr(v) for v in vals)) for m, vals in zip(members, values)]
    return name, lines, binds


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
            if len(cols) <= 6 and all(isinstance(v[c], bool) for v in values for c in cols):
                return _either(tuple(names), frozenset(inside), frozenset(outside))
            picks = sorted(inside, key=lambda t: [values.index(v) for v in values
                                                  if tuple(v[c] for c in cols) == t][0])
            if size == 1:
                if len(picks) == 1 and isinstance(picks[0][0], bool):      # a flag: `with_x`, `not with_x`
                    return names[0] if picks[0][0] else f"not {names[0]}"
                if len(picks) == 1:
                    return f"{names[0]} == {picks[0][0]!r}"
                return f"{names[0]} in ({', '.join(repr(p[0]) for p in picks)})"
            lhs = "(" + ", ".join(names) + ")"
            if len(picks) == 1:
                return f"{lhs} == {picks[0]!r}"
            return f"{lhs} in ({', '.join(repr(p) for p in picks)})"
    raise AssertionError("distinct variants have distinct keys")


@functools.lru_cache(maxsize=None)
def _either(names, inside, outside) -> str:
    """A short `or` of `and`s of flags (`name`, `not name`) true for the flag tuples `inside` and false
    for those `outside` (on a tuple no variant has, either): the fewest terms where two terms do, else
    terms taken greedily, the one that holds for the most tuples left first."""
    terms = [t for t in itertools.product((None, True, False), repeat=len(names))
             if not any(_covers(t, v) for v in outside) and any(_covers(t, v) for v in inside)]
    primes = [t for t in terms if not any(u != t and _covers(u, t) for u in terms)]
    primes.sort(key=lambda t: sum(a is not None for a in t))
    best = None
    for size in (1, 2):
        covers = [c for c in itertools.combinations(primes, size)
                  if all(any(_covers(t, v) for t in c) for v in inside)]
        if covers:
            best = min(covers, key=lambda c: sum(a is not None for t in c for a in t))
            break
    if best is None:
        best, left = [], set(inside)
        while left:
            t = max(primes, key=lambda t: (sum(_covers(t, v) for v in left), -sum(a is not None for a in t)))
            best.append(t)
            left = {v for v in left if not _covers(t, v)}
    words = [[name if a else f"not {name}" for name, a in zip(names, t) if a is not None] for t in best]
    if len(words) == 1:
        return " and ".join(words[0])
    return " or ".join(" and ".join(w) if len(w) == 1 else "(" + " and ".join(w) + ")" for w in words)


def _covers(term, flags) -> bool:
    return all(a is None or a == b for a, b in zip(term, flags))


def products(aliases: Sequence[str], functions: Sequence[Printed], variant_name, bare: bool = False
             ) -> Tuple[List[str], List[str]]:
    """(alias lines left, calls) for `merge`'s alias lines: those of a shared function whose variants are the
    product of its params' choices become one `specialized(prefix, make_..., axes...)` (tkgen/runtime/schedule.py),
    a dict of the same names bound to the same arguments (checked here), where that takes fewer lines; those
    that are the union of a few such products (the variants where one of two optional inputs is given), a
    call for each. `bare`: the dicts are keyed by the variants' names alone (the prefix of the functions' names
    left out)."""
    from ..runtime.schedule import specialized
    variant_of = {fn.name: fn.variant for fn in functions}
    by_merged: Dict[str, List[Tuple[str, str, tuple]]] = {}
    left, calls = [], []
    for line in aliases:
        try:
            node = ast.parse(line).body[0]
        except SyntaxError:         # a variant name that is no identifier: kept as written, for the audit to reject
            left.append(line)
            continue
        call = node.value
        by_merged.setdefault(call.args[0].id, []).append(
            (line, node.targets[0].id, tuple(ast.literal_eval(a) for a in call.args[1:])))
    for merged, binds in by_merged.items():
        found = _product(merged, binds, variant_of, variant_name, bare) if len(binds) > 2 else None
        if found is not None:
            sources, prefix = found
            table: dict = {}
            for source in sources:
                # our own source, literals and two names only: no builtins reachable from it
                part = eval(source, {"__builtins__": {}, "specialized": specialized, merged: _factory})
                if set(part) & set(table):
                    break
                table.update(part)
            else:
                if {n: p.args for n, p in table.items()} == {n[len(prefix):]: args for _, n, args in binds}:
                    calls += sources
                    continue
        left += [line for line, _, _ in binds]
    return left, calls


MAX_PRODUCTS = 4        # the most `specialized` calls one shared function's variants are written as


def _product(merged: str, binds, variant_of, variant_name, bare) -> Optional[Tuple[List[str], str]]:
    """(sources of the `specialized(...)` calls naming the variants bound to `merged`, the prefix they leave out
    of their functions' names), or None where their names are not the product of their choices, nor the union
    of a few products (at most MAX_PRODUCTS, and a quarter of the variants)."""
    variants = [variant_of.get(name) for _, name, _ in binds]
    if any(v is None for v in variants):
        return None
    first = binds[0][1]
    own = variant_name(variants[0])
    if not first.endswith(own):
        return None
    prefix = first[:len(first) - len(own)]
    groups = _tied(variants)
    # the arguments: the keys whose values differ between the variants (merge's `keys`)
    argued = [len({repr(tuple(v[k] for k in keys)) for v in variants}) > 1 for keys in groups]
    limit = 1 if len(binds) < 4 * 2 else min(MAX_PRODUCTS, len(binds) // 4)
    parts = _split(variants, groups, limit)
    if parts is None:
        return None
    sources = []
    for part in parts:
        axes = []
        for keys, is_arg in zip(groups, argued):
            axis = _axis(part, keys, is_arg, variant_name)
            if axis is None:
                return None
            if axis:
                axes.append(axis)
        sources.append(f"specialized({'' if bare else prefix!r}, {merged}, {', '.join(axes)})")
    return sources, prefix if bare else ""


def _axis(variants, keys, is_arg, variant_name) -> Optional[str]:
    """Source of the axis of `specialized` for a group of keys over `variants` ("" for none), or None where
    two choices would have the same part of the name."""
    values = list(dict.fromkeys(tuple(v[k] for k in keys) for v in variants))
    parts = [variant_name(dict(zip(keys, value))) for value in values]
    parts = ["" if p == "base" else p for p in parts]
    if not is_arg:
        return repr(parts[0]) if parts[0] else ""
    if len(set(parts)) < len(parts):
        return None
    if len(keys) > 1:          # arguments that go together: one axis of (part of the name, their values)
        return repr([(p, *value) for p, value in zip(parts, values)])
    if parts == [str(c).lower() if isinstance(c, bool) else str(c) for c, in values]:
        return repr(tuple(c for c, in values))
    return repr(dict(zip(parts, (c for c, in values))))


def _split(variants, groups, limit) -> Optional[List[list]]:
    """`variants` as the fewest subsets (at most `limit`) each the product of its groups' choices, split on
    one group's values at a time; None where more would be needed."""
    def choices(vs):
        return [list(dict.fromkeys(repr(tuple(v[k] for k in keys)) for v in vs)) for keys in groups]

    def best(vs, room):
        if room < 1:
            return None
        counts = [len(c) for c in choices(vs)]
        if len(vs) == math.prod(counts):
            return [vs]
        found = None
        for i, keys in enumerate(groups):
            budget = room if found is None else len(found) - 1
            if counts[i] < 2 or budget < counts[i]:
                continue
            parts = []
            for n, value in enumerate(choices(vs)[i]):
                sub = best([v for v in vs if repr(tuple(v[k] for k in keys)) == value],
                           budget - len(parts) - (counts[i] - n - 1))
                if sub is None:
                    break
                parts += sub
            else:
                found = parts
        return found

    return best(list(variants), limit)


def _tied(variants) -> List[Tuple[str, ...]]:
    """The variants' keys in order, adjacent keys that vary together (each one's value tells the other's:
    an optional input and one given with it, or read at its positions) in one group."""
    groups: List[Tuple[str, ...]] = []
    for key in variants[0]:
        if groups and _together(variants, groups[-1] + (key,)):
            groups[-1] += (key,)
        else:
            groups.append((key,))
    return groups


def _together(variants, keys) -> bool:
    """Whether the keys' values vary, and each key's value tells the others' in every variant."""
    combos = {tuple(repr(v[k]) for k in keys) for v in variants}
    return len(combos) > 1 and all(len({c[i] for c in combos}) == len(combos) for i in range(len(keys)))


def _factory(*args):
    """Stands for a shared function where `products` checks the arguments its variants are bound to."""
