"""The builder: one variant's compute block checked and turned into a `Program`.

Statements run in order. A call of a statement-level stage (tkgen/lower/stages/base.py: STAGES) nested inside an
expression is hoisted into a statement of its own (`max(absmax(x, c), 1)` -> `_t0 = absmax(x, c)`), then
each statement is built by its stage's class; a statement that is an elementwise expression becomes a
`Map`. What the builder keeps for every stage: the values defined so far (with their axes and dtypes),
the constants (values over no axis), the params and dims used as values, and the errors at their stage.
"""
from __future__ import annotations

import difflib
import re

from typing import Dict, List

from ...spec import expr as E
from ...spec.safety import did_you_mean
from ...ir import prim as ir
from .base import FUNCTIONS, INTS, RAW, STAGES, Call, Program, StageError, Step, Value, order
from .elementwise import assign, binary, unary
from .memory import Load


def _hoist(node, out, counter, top=False):
    """Pull structural calls out of an expression: `max(absmax(x, c), 1)` -> `_t0 = absmax(x, c)`.

    Hoisted statements are appended to `out` in evaluation order; the expression that is left refers to
    them by their temporary names.
    """
    if isinstance(node, E.Call):
        node = E.Call(node.fn, tuple(_hoist(a, out, counter) for a in node.args), node.col)
        if node.fn in STAGES and not top:
            name = f"_t{counter[0]}"
            counter[0] += 1
            out.append(((name,), node))
            return E.Name(name, node.col)
        return node
    if isinstance(node, E.Binary):
        return E.Binary(node.op, _hoist(node.lhs, out, counter), _hoist(node.rhs, out, counter), node.col)
    if isinstance(node, E.Unary):
        return E.Unary(node.op, _hoist(node.arg, out, counter), node.col)
    return node


def _flatten(spec, temporaries=None):
    """The compute block as (stage index, targets, expression) with nested structural calls hoisted;
    `temporaries`, when given, takes each hoisted name's expression as the spec writes it."""
    counter = [0]
    for st in spec.stages:
        pre = []
        top = _hoist(st.value, pre, counter, top=True)
        for targets, node in pre:
            if temporaries is not None:
                temporaries[targets[0]] = E.to_source(_unhoisted(node, temporaries))
            yield st.index, targets, node
        yield st.index, st.targets, top


def _unhoisted(node, temporaries):
    """`node` with the temporaries it reads replaced by their expressions (as the user wrote them)."""
    if isinstance(node, E.Name) and node.id in temporaries:
        return E.Name(temporaries[node.id], node.col)
    if isinstance(node, E.Call):
        return E.Call(node.fn, tuple(_unhoisted(a, temporaries) for a in node.args), node.col)
    if isinstance(node, E.Binary):
        return E.Binary(node.op, _unhoisted(node.lhs, temporaries), _unhoisted(node.rhs, temporaries), node.col)
    if isinstance(node, E.Unary):
        return E.Unary(node.op, _unhoisted(node.arg, temporaries), node.col)
    return node


_TEMPORARY = re.compile(r"\b_t\d+\b")


def in_user_terms(spec, message: str) -> str:
    """`message` with the builder's temporaries (`_t0`, hoisted stage calls) shown as the expressions the
    spec writes: errors speak of what the user wrote."""
    if not _TEMPORARY.search(message):
        return message
    temporaries = {}
    for _ in _flatten(spec, temporaries):
        pass
    return _TEMPORARY.sub(lambda m: temporaries.get(m.group(0), m.group(0)), message)


def int_literal(node):
    """The value of an integer literal (or of a negated one), else None."""
    if isinstance(node, E.Unary) and node.op == "-":
        v = int_literal(node.arg)
        return None if v is None else -v
    if isinstance(node, E.Num) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


_INT_RANGE = {ir.I32: (-2 ** 31, 2 ** 31 - 1), ir.I64: (-2 ** 63, 2 ** 63 - 1)}


class Builder:
    """Checks one variant's compute block and builds its Program."""

    def __init__(self, spec, elements, scales, variant):
        self.spec, self.elements, self.scales, self.variant = spec, elements, scales, variant
        self.values: Dict[str, Value] = {}
        self.steps: List[Step] = []
        self.whole = set()
        self.consts: Dict[str, ir.Expr] = {}     # values over no axis (absent inputs, params): their expression
        self.scalars: Dict[str, str] = {}
        self.rounds = set()
        self.keep = None
        self.counts = set()
        self.joining = False         # inside join(...): where counts may be named
        self.partials = set()        # reductions over the rows: each block's part, added into an output
        self.assigned = {}           # value name -> the compute statement that assigns it
        self.at = {}
        self.sizes: Dict[str, E.Node] = {}   # integer values of params and dims, computed in Python

    # -- errors and arguments ---------------------------------------------------------------------------
    def fail(self, idx, msg, node=None):
        raise StageError(idx, msg, getattr(node, "col", 0))

    @property
    def rows(self):
        """The axis of the rows (the first axis), when the op has a dynamic dim."""
        return next(iter(self.spec.axes)) if self.spec.dynamic_dim else None

    def format_arg(self, idx, node, table, kind):
        if not isinstance(node, E.Name):
            self.fail(idx, f"expected the name of a {kind} format or of a param that names one", node)
        name = self.variant.get(node.id, node.id)
        if name not in table:
            self.fail(idx, f"{node.id!r} is not a {kind} format (or a param naming one)", node)
        return table[name]

    def axis_arg(self, idx, node):
        if not isinstance(node, E.Name) or node.id not in self.spec.axes:
            hint = did_you_mean(node.id, self.spec.axes) if isinstance(node, E.Name) else ""
            self.fail(idx, f"expected an axis ({', '.join(self.spec.axes)}), found {E.to_source(node)!r}{hint}", node)
        return node.id

    def value_arg(self, idx, node):
        if not isinstance(node, E.Name) or node.id not in self.values:
            self.fail(idx, f"expected a value computed by an earlier stage, found {E.to_source(node)!r}", node)
        self.readable(idx, node)
        return self.values[node.id]

    def readable(self, idx, node):
        """A value that a block holds only its part of cannot be computed with."""
        if node.id in self.partials:
            self.fail(idx, f"{node.id!r} is reduced over the rows, which blocks split: each block adds its part "
                           "into the output that stores it, so it can only be stored", node)

    def whole_axis(self, idx, axis, what, node=None):
        """An axis that a block holds whole, because `what` runs along it: not the rows, which blocks split."""
        if axis == self.rows:
            self.fail(idx, f"{what} runs along the rows (axis {axis!r}), which blocks split; it needs another "
                           "axis", node)
        self.whole.add(axis)

    def input_arg(self, idx, node, fn):
        if not isinstance(node, E.Name) or node.id not in self.spec.inputs:
            hint = did_you_mean(node.id, self.spec.inputs) if isinstance(node, E.Name) else ""
            self.fail(idx, f"{fn} takes an input tensor ({', '.join(self.spec.inputs)}), found "
                           f"{E.to_source(node)!r}{hint}", node)
        return self.spec.inputs[node.id]

    # -- values ---------------------------------------------------------------------------------------
    def define(self, idx, name, axes, dtype):
        if name in self.values or name in self.spec.inputs or name in self.consts:
            self.fail(idx, f"{name!r} is assigned twice")
        if name in self.spec.params or name in self.spec.dims or name in self.spec.axes:
            self.fail(idx, f"{name!r} names a param, dim or axis; choose another name for the value")
        v = Value(name, order(self.spec, axes), dtype)
        self.values[name] = v
        self.assigned.setdefault(name, idx)
        return v

    def constant(self, idx, name, e):
        """A value over no axes: later uses see the expression itself."""
        self.define(idx, name, (), e.dtype)       # checks the name
        del self.values[name]
        self.consts[name] = e

    def size(self, idx, name, node):
        """A value computed once from params and dims (tkgen/lower/stages/elementwise.py: _size_expression): an
        i32 scalar that the factory and the reference compute in Python."""
        self.define(idx, name, (), ir.I32)       # checks the name
        del self.values[name]
        runtime = [n for n in E.names(node) if n in self.spec.params and self.spec.params[n].runtime]
        if runtime:
            self.fail(idx, f"{runtime[0]!r} is a runtime param: a size (integer arithmetic with // or %) is "
                           "computed when the kernel is built, before the kernel sees it", node)
        self.sizes[name] = node
        self.scalars[name] = "size"
        self.consts[name] = ir.Var(name, ir.I32)

    def add(self, idx, step: Step) -> Step:
        object.__setattr__(step, "stage_index", idx)    # where errors of its lowering point
        self.steps.append(step)
        return step

    def loaded(self, name):
        """The Load step that defines value `name`, or None."""
        return next((x for x in self.steps if isinstance(x, Load) and x.out.name == name), None)

    # -- statements -----------------------------------------------------------------------------------
    def statement(self, idx, targets, node):
        cls = STAGES.get(node.fn) if isinstance(node, E.Call) else None
        if cls is None:
            assign(self, idx, targets, node)
            return
        st = cls()
        problem = st.arity_problem(node.fn, len(node.args))
        if problem:
            self.fail(idx, problem, node)
        if st.targets == 1 and len(targets) != 1:
            self.fail(idx, f"{node.fn} produces one value; found {len(targets)} names to assign", node)
        call = Call(idx, node.fn, tuple(targets), node.args, node.col)
        st.build(self, call, *(self.argument(idx, node.fn, k, a) for k, a in zip(st.kinds(len(node.args)), node.args)))

    def argument(self, idx, fn, kind, node):
        """A stage's argument of kind `kind` (tkgen/lower/stages/base.py: Stage)."""
        if kind == "input":
            return self.input_arg(idx, node, fn)
        if kind == "value":
            return self.value_arg(idx, node)
        if kind == "axis":
            return self.axis_arg(idx, node)
        if kind in ("element", "scale"):
            return self.format_arg(idx, node, self.elements if kind == "element" else self.scales, kind)
        return node

    def axes_of(self, e):
        """The axes an expression varies over: those of the values it reads and of the axis indices."""
        names = ir.var_names(e)
        return {a for n in names if n in self.values for a in self.values[n].axes} | \
            {n[1:] for n in names if n.startswith("#")}

    def elementwise(self, idx, node, axes) -> ir.Expr:
        """The primitive IR of an elementwise expression; `axes` collects the axes of the values it reads."""
        if isinstance(node, E.Num):
            return ir.c(node.value, ir.F32)
        if isinstance(node, E.Name):
            return self.name(idx, node, axes)
        if isinstance(node, E.Unary):
            return unary(self, idx, node, self.elementwise(idx, node.arg, axes))
        if isinstance(node, E.Binary):
            picked = self.variant_test(idx, node)
            if picked is not None:
                return picked
            return binary(self, idx, node, *self.operands(idx, (node.lhs, node.rhs), axes))
        if isinstance(node, E.Call):
            if node.fn in STAGES:
                self.fail(idx, f"{node.fn} cannot be used here", node)
            cls = FUNCTIONS.get(node.fn)
            if cls is None:
                names = sorted(set(FUNCTIONS) | set(STAGES))
                close = difflib.get_close_matches(node.fn, names, n=5, cutoff=0.6)
                hint = f"did you mean {', '.join(close)}?" if close else \
                    f"the stage library's {len(names)} functions and stages are in docs/spec-language.md"
                self.fail(idx, f"unknown function {node.fn!r}; {hint}", node)
            lo, hi = cls.arity
            if not lo <= len(node.args) <= hi:
                self.fail(idx, f"{node.fn} takes {lo} argument(s), found {len(node.args)}", node)
            try:
                return cls().build(self, idx, node, axes)
            except TypeError as e:
                self.fail(idx, f"{node.fn}: {e}", node)
        self.fail(idx, f"unsupported expression {E.to_source(node)!r}", node)

    def variant_test(self, idx, node):
        """`p == 'v'` or `p != 'v'` of a structural param p: a constant of the variant, so that
        `where(scoring == 'sigmoid', ..., ...)` keeps one branch (the other, and what only it reads, is
        pruned). None for any other expression."""
        if node.op not in ("==", "!=") or not any(isinstance(x, E.Str) for x in (node.lhs, node.rhs)):
            return None
        name, text = (node.lhs, node.rhs) if isinstance(node.rhs, E.Str) else (node.rhs, node.lhs)
        p = self.spec.params.get(name.id) if isinstance(name, E.Name) else None
        if p is None or not p.structural or p.boolean or text.value not in p.choices:
            self.fail(idx, f"a string compares with a structural param, as one of its values: "
                           f"{E.to_source(node)!r}", node)
        return ir.Const((self.variant[p.name] == text.value) == (node.op == "=="), ir.BOOL)

    def name(self, idx, node, axes):
        """A name in an expression: a value, a constant, a param (a boolean one is a bool constant of its
        variant) or a static dim, or `inf` (float32 +inf)."""
        if node.id in self.values:
            v = self.values[node.id]
            if v.dtype == RAW:
                self.fail(idx, f"{v.name!r} holds copied elements: it can only be stored to an output", node)
            self.readable(idx, node)
            if v.name in self.counts and not self.joining:
                self.fail(idx, f"{v.name!r} is a count that every block adds into its output: it can only be "
                               "stored, alone or joined with other counts", node)
            axes.update(v.axes)
            return ir.Var(v.name, v.dtype)
        if node.id in self.consts:
            return self.consts[node.id]
        p = self.spec.params.get(node.id)
        d = self.spec.dims.get(node.id)
        if p is not None and p.optional and not self.variant.get(f"?{p.name}"):
            return ir.c(p.absent, ir.F32)       # an optional float param given as None
        if p is not None and p.boolean:
            return ir.c(bool(self.variant[p.name]), ir.BOOL)     # a constant in each of its variants
        if (p is not None and not p.structural) or (d is not None and not d.dynamic):
            self.scalars[node.id] = "param" if p is not None else "dim"
            return ir.Var(node.id, ir.F32)
        if p is not None or d is not None:
            self.fail(idx, f"{node.id!r} cannot be a value: only numeric and boolean params and static dims can", node)
        if node.id == "inf":
            return ir.c(float("inf"), ir.F32)
        if node.id in self.spec.inputs:
            self.fail(idx, f"{node.id!r} is an input tensor: read it with load({node.id})", node)
        values = sorted(n for n in set(self.values) | set(self.consts) if not n.startswith("_"))
        usable = values + sorted(n for n, p in self.spec.params.items() if not p.structural or p.boolean) + \
            sorted(n for n, d in self.spec.dims.items() if not d.dynamic)
        self.fail(idx, f"unknown value {node.id!r}{did_you_mean(node.id, usable)} "
                       f"(values so far: {', '.join(values) or 'none'})", node)

    def operands(self, idx, nodes, axes):
        """The IR of an operation's operands. Literals are f32, except next to an integer operand: an
        integer literal there is a constant of that dtype (`max(e - 6, 0)` on exponents), and so is an
        integer param or static dim. An i32 operand next to an i64 one is widened (exactly)."""
        args = [self.elementwise(idx, n, axes) for n in nodes]
        ints = [a.dtype for a in args if a.dtype in INTS]
        if not ints:
            return args
        dtype = ir.I64 if ir.I64 in ints else ir.I32
        out = []
        for n, a in zip(nodes, args):
            lit = int_literal(n)
            if lit is not None:
                lo, hi = _INT_RANGE[dtype]
                if not lo <= lit <= hi:
                    self.fail(idx, f"{lit} does not fit in {dtype} (next to a {dtype} value)", n)
                a = ir.Const(lit, dtype)
            elif isinstance(a, ir.Var) and a.name in self.scalars and a.dtype == ir.F32 and self.integral(a.name):
                a = ir.Var(a.name, dtype)
            elif a.dtype == ir.I32 and dtype == ir.I64:
                a = ir.op("to_i64", a)
            out.append(a)
        return out

    def integral(self, name) -> bool:
        """Whether a param or dim used as a value holds an integer (so that it takes part in integer
        arithmetic as one)."""
        p = self.spec.params.get(name)
        return p is None or p.kind != "float"

    # -- the program ----------------------------------------------------------------------------------
    def positions(self, idx, tensor):
        """The loaded positions of a tensor addressed `at:` them (loaded once, as a value of its own)."""
        pos = self.spec.inputs[tensor.at]
        loaded = next((st.out for st in self.steps if isinstance(st, Load) and st.tensor == pos.name and not st.fixed
                       and st.segment is None), None)
        if loaded is not None:
            return loaded
        name = f"_at_{pos.name}"
        if name not in self.values:
            self.values[name] = Value(name, pos.axes, Load.dtype_of(pos))
            step = Load(self.values[name], pos.name)
            object.__setattr__(step, "stage_index", idx)
            self.steps.insert(0, step)
        return self.values[name]

    def prune(self, outputs):
        """Drop steps whose value nothing uses (a load whose halves were all taken, the reductions that feed
        only an output this variant does not write)."""
        live = {v.name for v in outputs.values()} | set(self.at.values()) | ({self.keep.name} if self.keep else set())
        kept = []
        for st in reversed(self.steps):
            if st.out.name not in live and st.prunable:
                continue
            kept.append(st)
            live |= st.sources()
        self.steps = kept[::-1]
        for name in [n for n in self.values if n not in live]:
            del self.values[name]

    def finish(self):
        outputs = {}
        last = len(self.spec.stages) - 1
        for name, t in self.spec.outputs.items():
            if not self.spec.writes(t, self.variant):
                continue            # not written in this variant
            if name not in self.values:
                raise StageError(last, f"output {name!r} is never assigned")
            v = self.values[name]
            at = self.assigned.get(name, last)
            src = next((st.tensor for st in self.steps if st.out.name == name and st.copies), None)
            if src is not None and src != t.like:      # a `like` output may also hold computed values
                raise StageError(at, f"output {name!r} must be declared `like: {src}` to hold copy({src})")
            if set(v.axes) != set(t.axes):
                raise StageError(at, f"output {name!r} varies over {list(v.axes)} but its view has axes {list(t.axes)}")
            problem = _store_problem(t, v)
            if problem:       # reported at the output's declaration, which names its type
                doc = self.spec.doc_ref
                declared = doc.data.get("outputs", {}).get(name, {}) if doc is not None else {}
                key = next((k for k in ("dtype", "dtypes", "format", "scale_format", "like") if k in declared), None)
                raise StageError(at, f"output {name!r}: {problem} (`{_statement_text(self.spec, at)}`)",
                                 field_path=("outputs", name) + ((key,) if key else ()))
            if t.at:
                self.at[name] = self.positions(last, t).name
            outputs[name] = v
        self.prune(outputs)
        filled = {n for n in outputs if self.spec.tensors[n].fill is not None or
                  (self.spec.tensors[n].into is not None and self.spec.tensors[n].at)}
        return Program(self.values, self.steps, outputs, self.whole, self.scalars, self.rounds, self.keep, self.at,
                       self.counts & set(self.values), self.sizes, filled)


def _statement_text(spec, idx, limit=60):
    text = next((st.text for st in spec.stages if st.index == idx), "")
    return text if len(text) <= limit else text[:limit] + "..."


def _store_problem(t, v):
    """Why value `v` cannot be stored to output `t`: integer outputs hold integers, the others floats."""
    if v.dtype == RAW:
        return None
    if v.dtype == ir.BOOL:
        return "it holds a condition; a condition is not stored (store where(c, 1.0, 0.0), or count it)"
    integer = not t.format_ref and not t.scale_ref and bool(t.dtypes) and \
        all(dt in ("int32", "int64") for dt in t.dtypes)
    if integer != (v.dtype in INTS):
        kind = "an integer" if integer else "a float"
        return f"{kind} output holds {'integer' if integer else 'float'} values; the value stored is {v.dtype}"
    return None


def build_program(spec, elements, scales, variant) -> Program:
    b = Builder(spec, elements, scales, variant)
    for idx, targets, node in _flatten(spec):
        b.statement(idx, targets, node)
    return b.finish()
