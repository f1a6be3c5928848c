"""The stage library: what the functions of a `compute:` block mean.

A compute block is a list of statements such as `amax = max(absmax(xf, c), 1e-4)`. This module checks them
(names, arities, axes) and turns them, for one variant of an op, into a `Program`: a list of steps of a few
kinds (load, elementwise map, reduction, top-k). Each value carries the axes it varies over; elementwise
expressions broadcast over axes, reductions remove one, top-k replaces one. Elementwise expressions become
primitive IR (ir.py), so the kernel and the reference print the same arithmetic.

Adding a capability means adding a function here (its type rule and its expansion), plus its lowering in
lower.py (its kernel IR): never raw TileLang inside a spec.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from . import expr as E
from . import formats as F
from . import ir
from .ir import F32, I32, op

REDUCTIONS = {"absmax": "absmax", "amax": "max", "amin": "min", "sum": "sum"}
STRUCTURAL = {"load", "copy", "topk", "scale_from_amax", "take", "join", "count", "keep_rows", *REDUCTIONS}
RAW = "raw"                    # the dtype of `copy` values: stored elements, moved bit for bit
# elementwise functions: name -> (arity range, builder over IR args)
_UNARY_MATH = {"exp", "log", "sqrt", "rsqrt"}
ELEMENTWISE = {"max": (2, 2), "min": (2, 2), "abs": (1, 1), "clamp": (3, 3), "where": (3, 3),
               "sigmoid": (1, 1), "round_to": (2, 2), "exponent": (1, 1), "exp2": (1, 1),
               **{f: (1, 1) for f in _UNARY_MATH}}
# reductions that integer (i32) values may take: exact whatever the order
INT_REDUCTIONS = {"amax", "amin"}
# functions whose first argument names an element format (or a param naming one)
FORMAT_FUNCTIONS = {"min_amax": 1}
_BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "==": "eq", "!=": "ne", "<": "lt", "<=": "le",
           ">": "gt", ">=": "ge", "and": "and", "or": "or"}


@dataclass(frozen=True)
class Value:
    name: str
    axes: Tuple[str, ...]      # in the op's axis order
    dtype: str                 # ir dtype: f32 | i32 | bool


@dataclass(frozen=True)
class Load:
    out: Value
    tensor: str
    fixed: Tuple[Tuple[str, int], ...] = ()   # (axis, index): axes of the tensor's view held at one index


@dataclass(frozen=True)
class Copy:
    out: Value                 # dtype RAW: the input's stored elements, never decoded
    tensor: str


@dataclass(frozen=True)
class Map:
    out: Value
    expr: ir.Expr              # Vars name other values


@dataclass(frozen=True)
class Reduce:
    out: Value
    kind: str                  # absmax | max | min | sum
    src: Value
    axis: str


@dataclass(frozen=True)
class TopK:
    out: Value
    src: Value
    over: str
    new: str


@dataclass(frozen=True)
class Gather:
    out: Value                 # over the axes of the positions' view
    tensor: str                # an input addressed `at:` positions: its element at each position, 0 outside
    index: Value               # the loaded positions (i32)


@dataclass(frozen=True)
class Count:
    out: Value                 # i32 over no axes: this block's part of a count over every block
    expr: ir.Expr              # bool over `axes`
    axes: Tuple[str, ...]


@dataclass
class Program:
    """One variant of an op as steps over named values; outputs map tensor names to values."""

    values: Dict[str, Value]
    steps: List[object]
    outputs: Dict[str, Value]
    whole_axes: set = field(default_factory=set)   # axes that a block must hold entirely
    scalars: Dict[str, str] = field(default_factory=dict)   # params and dims used as values: name -> param|dim
    rounds: set = field(default_factory=set)       # inputs whose dtype a `round_to(input, v)` rounds to
    keep: Value = None                             # keep_rows: the rows that are written (None: every row)
    at: Dict[str, str] = field(default_factory=dict)   # output addressed `at:` positions -> the positions' value
    counts: set = field(default_factory=set)       # values summed over every block: counts and joins of them

    def accumulated(self, dyn_axis) -> set:
        """Outputs that every block adds into, so they start at 0: sums over the dynamic axis, counts, and
        outputs addressed `at:` positions."""
        sums = {st.out.name for st in self.steps if isinstance(st, Reduce) and st.axis == dyn_axis} | self.counts
        return {t for t, v in self.outputs.items() if v.name in sums or t in self.at}

    @property
    def used_axes(self) -> set:
        """Axes some value varies over (an axis only held at a fixed index by `take` is not one)."""
        return {a for v in self.values.values() for a in v.axes}


class StageError(ValueError):
    def __init__(self, stage_index, message):
        self.stage_index, self.message = stage_index, message
        super().__init__(message)


def _order(spec, axes):
    return tuple(a for a in spec.axes if a in axes)


def _hoist(node, out, counter, top=False):
    """Pull structural calls out of an expression: `max(absmax(x, c), 1)` -> `_t0 = absmax(x, c)`.

    Hoisted statements are appended to `out` in evaluation order; the expression that is left refers to
    them by their temporary names.
    """
    if isinstance(node, E.Call):
        node = E.Call(node.fn, tuple(_hoist(a, out, counter) for a in node.args), node.col)
        if node.fn in STRUCTURAL and not top:
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


def _flatten(spec):
    """The compute block as (stage index, targets, expression) with nested structural calls hoisted."""
    counter = [0]
    for st in spec.stages:
        pre = []
        top = _hoist(st.value, pre, counter, top=True)
        for targets, node in pre:
            yield st.index, targets, node
        yield st.index, st.targets, top


class _Builder:
    """Checks one variant's compute block and builds its Program."""

    def __init__(self, spec, elements, scales, variant):
        self.spec, self.elements, self.scales, self.variant = spec, elements, scales, variant
        self.values: Dict[str, Value] = {}
        self.steps: List[object] = []
        self.whole = set()
        self.consts: Dict[str, ir.Expr] = {}     # values that vary over no axis (absent inputs, params): their expression
        self.scalars: Dict[str, str] = {}
        self.rounds = set()
        self.keep = None
        self.counts = set()
        self.joining = False         # inside join(...): where counts may be named

    def fail(self, idx, msg):
        raise StageError(idx, msg)

    def format_arg(self, idx, node, table, kind):
        if not isinstance(node, E.Name):
            self.fail(idx, f"expected the name of a {kind} format or of a param that names one")
        name = self.variant.get(node.id, node.id)
        if name not in table:
            self.fail(idx, f"{node.id!r} is not a {kind} format (or a param naming one)")
        return table[name]

    def axis_arg(self, idx, node):
        if not isinstance(node, E.Name) or node.id not in self.spec.axes:
            self.fail(idx, f"expected an axis ({', '.join(self.spec.axes)}), found {E.to_source(node)!r}")
        return node.id

    def value_arg(self, idx, node):
        if not isinstance(node, E.Name) or node.id not in self.values:
            self.fail(idx, f"expected a value computed by an earlier stage, found {E.to_source(node)!r}")
        return self.values[node.id]

    def define(self, idx, name, axes, dtype):
        if name in self.values or name in self.spec.inputs or name in self.consts:
            self.fail(idx, f"{name!r} is assigned twice")
        if name in self.spec.params or name in self.spec.dims or name in self.spec.axes:
            self.fail(idx, f"{name!r} names a param, dim or axis; choose another name for the value")
        v = Value(name, _order(self.spec, axes), dtype)
        self.values[name] = v
        return v

    def statement(self, idx, targets, node):
        fn = node.fn if isinstance(node, E.Call) else None
        nargs = len(node.args) if fn else 0
        want = {"load": 1, "copy": 1, "topk": 3, "scale_from_amax": 3, "take": 3, "count": 1, "keep_rows": 1,
                **{r: 2 for r in REDUCTIONS}}.get(fn)
        if want is not None and nargs != want:
            self.fail(idx, f"{fn} takes {want} arguments, found {nargs}")
        if fn == "join" and nargs < 3:
            self.fail(idx, "join(v0, v1, ..., axis) takes two or more values and a new axis")
        if fn in STRUCTURAL and fn != "scale_from_amax" and len(targets) != 1:
            self.fail(idx, f"{fn} produces one value; found {len(targets)} names to assign")
        if fn == "load":
            t = node.args[0]
            if not isinstance(t, E.Name) or t.id not in self.spec.inputs:
                self.fail(idx, f"load takes an input tensor ({', '.join(self.spec.inputs)})")
            tensor = self.spec.inputs[t.id]
            is_int = bool(tensor.dtypes) and all(dt in ("int32", "int64") for dt in tensor.dtypes)
            if tensor.optional and not self.variant.get(f"?{t.id}"):
                self.define(idx, targets[0], (), F32)        # checks the name; the value is a constant
                del self.values[targets[0]]
                self.consts[targets[0]] = ir.c(tensor.absent, I32 if is_int else F32)
                return
            out = self.define(idx, targets[0], tensor.axes, I32 if is_int else F32)
            self.steps.append(Gather(out, t.id, self.positions(idx, tensor)) if tensor.at else Load(out, t.id))
        elif fn == "copy":
            t = node.args[0]
            if not isinstance(t, E.Name) or t.id not in self.spec.inputs:
                self.fail(idx, f"copy takes an input tensor ({', '.join(self.spec.inputs)})")
            out = self.define(idx, targets[0], self.spec.inputs[t.id].axes, RAW)
            self.steps.append(Copy(out, t.id))
        elif fn == "keep_rows":
            self.keep_rows(idx, targets[0], node.args[0])
        elif fn == "count":
            axes = set()         # those of the condition as written: folded to a constant, it counts 0 there
            cond = ir.fold(self.elementwise(idx, node.args[0], axes))
            if cond.dtype != ir.BOOL:
                self.fail(idx, "count(c) counts where a condition holds: c must be a comparison")
            if next(iter(self.spec.axes)) not in axes:
                self.fail(idx, "count(c): c must vary over the rows (each block counts its own elements)")
            out = self.define(idx, targets[0], (), I32)
            self.counts.add(out.name)
            self.steps.append(Count(out, cond, _order(self.spec, axes)))
        elif fn == "join":
            # join(v0, v1, ..., axis): a value over `axis` (extent = number of parts) whose slice i is vi
            axis = self.axis_arg(idx, node.args[-1])
            axes = set()
            self.joining = True
            parts = [self.elementwise(idx, a, axes) for a in node.args[:-1]]
            self.joining = False
            counted = [isinstance(p, ir.Var) and p.name in self.counts for p in parts]
            if any(counted) and not all(counted):
                self.fail(idx, "join: counts are joined only with other counts")
            if axis in axes:
                self.fail(idx, f"join: the parts must not vary over the new axis {axis!r}")
            if len({p.dtype for p in parts}) != 1:
                self.fail(idx, "join: the parts must have one dtype")
            at = ir.Var(f"#{axis}", I32)                  # the index along `axis`
            e = parts[-1]
            for i in range(len(parts) - 2, -1, -1):
                e = op("select", op("eq", at, ir.Const(i, I32)), parts[i], e)
            self.steps.append(Map(self.define(idx, targets[0], axes | {axis}, e.dtype), ir.fold(e)))
            if all(counted):
                self.counts.add(targets[0])
        elif fn == "take":
            src = self.value_arg(idx, node.args[0])
            axis = self.axis_arg(idx, node.args[1])
            at = node.args[2]
            load = next((x for x in self.steps if isinstance(x, Load) and x.out.name == src.name), None)
            if load is None:
                self.fail(idx, "take(v, axis, i) takes a loaded value: `take(load(x), s, 0)`")
            if axis not in src.axes:
                self.fail(idx, f"{src.name!r} does not vary over axis {axis!r}")
            if not isinstance(at, E.Num) or not isinstance(at.value, int) or at.value < 0:
                self.fail(idx, "take(v, axis, i): i must be a non-negative integer literal")
            out = self.define(idx, targets[0], [a for a in src.axes if a != axis], src.dtype)
            self.steps.append(Load(out, load.tensor, load.fixed + ((axis, at.value),)))
        elif fn in REDUCTIONS:
            src = self.value_arg(idx, node.args[0])
            axis = self.axis_arg(idx, node.args[1])
            if axis not in src.axes:
                self.fail(idx, f"{src.name!r} does not vary over axis {axis!r}")
            if src.dtype != F32 and not (src.dtype == I32 and fn in INT_REDUCTIONS):
                self.fail(idx, f"{fn} needs float values" + (" (integers take amax and amin)" if src.dtype == I32 else ""))
            self.whole.add(axis)
            out = self.define(idx, targets[0], [a for a in src.axes if a != axis], src.dtype)
            self.steps.append(Reduce(out, REDUCTIONS[fn], src, axis))
        elif fn == "topk":
            src = self.value_arg(idx, node.args[0])
            over, new = self.axis_arg(idx, node.args[1]), self.axis_arg(idx, node.args[2])
            if over not in src.axes or new in src.axes:
                self.fail(idx, f"topk(v, over, new): v must vary over {over!r} and not over {new!r}")
            self.whole |= {over, new}
            out = self.define(idx, targets[0], [a for a in src.axes if a != over] + [new], I32)
            self.steps.append(TopK(out, src, over, new))
        elif fn == "scale_from_amax":
            if len(targets) != 2:
                self.fail(idx, "scale_from_amax produces two values: `sf, inv = scale_from_amax(...)`")
            scale = self.format_arg(idx, node.args[0], self.scales, "scale")
            amax = self.value_arg(idx, node.args[1])
            elem = self.format_arg(idx, node.args[2], self.elements, "element")
            sf, inv = F.scale_pair(scale.value, ir.Var(amax.name, F32), elem.max_value)
            for name, e in zip(targets, (sf, inv)):
                self.steps.append(Map(self.define(idx, name, amax.axes, F32), e))
        else:
            if len(targets) != 1:
                self.fail(idx, "an elementwise expression produces one value")
            e = ir.fold(self.elementwise(idx, node, set()))
            axes = self.axes_of(e)          # after folding: `a0 > inf or pad` may not vary at all
            v = self.define(idx, targets[0], axes, e.dtype)
            if targets[0] not in self.spec.outputs and not axes:
                # a value over no axes: constants and params (an absent input or optional param, folded):
                # later uses see the expression itself
                del self.values[targets[0]]
                self.consts[targets[0]] = e
            elif targets[0] not in self.spec.outputs and isinstance(e, ir.Var) and e.name in self.values:
                self.values[targets[0]] = self.values[e.name]     # another name for a value: no copy
            else:
                self.steps.append(Map(v, e))

    def axes_of(self, e):
        """The axes an expression varies over: those of the values it reads and of the axis indices."""
        names = ir.var_names(e)
        return {a for n in names if n in self.values for a in self.values[n].axes} | \
            {n[1:] for n in names if n.startswith("#")}

    def elementwise(self, idx, node, axes) -> ir.Expr:
        rec = lambda n: self.elementwise(idx, n, axes)  # noqa: E731
        if isinstance(node, E.Num):
            return ir.c(node.value, F32)
        if isinstance(node, E.Name):
            if node.id in self.values:
                v = self.values[node.id]
                if v.dtype == RAW:
                    self.fail(idx, f"{v.name!r} holds copied elements: it can only be stored to an output")
                if v.name in self.counts and not self.joining:
                    self.fail(idx, f"{v.name!r} is a count that every block adds into its output: it can only be "
                                   "stored, alone or joined with other counts")
                axes.update(v.axes)
                return ir.Var(v.name, v.dtype)
            if node.id in self.consts:
                return self.consts[node.id]
            p = self.spec.params.get(node.id)
            d = self.spec.dims.get(node.id)
            if p is not None and p.optional and not self.variant.get(f"?{p.name}"):
                return ir.c(p.absent, F32)       # an optional float param given as None
            if (p is not None and not p.structural) or (d is not None and not d.dynamic):
                self.scalars[node.id] = "param" if p is not None else "dim"
                return ir.Var(node.id, F32)
            if p is not None or d is not None:
                self.fail(idx, f"{node.id!r} cannot be a value: only numeric params and static dims can")
            self.fail(idx, f"unknown value {node.id!r}; values so far: {sorted(self.values)}")
        if isinstance(node, E.Unary):
            a = rec(node.arg)
            return op("neg", a) if node.op == "-" else op("not", a)
        if isinstance(node, E.Binary):
            lhs, rhs = self.operands(idx, (node.lhs, node.rhs), axes)
            if node.op == "/" and lhs.dtype == I32:
                self.fail(idx, "'/' divides floats; integer values have no division")
            try:
                return op(_BINOPS[node.op], lhs, rhs)
            except (TypeError, KeyError) as e:
                self.fail(idx, f"operator {node.op!r}: {e}")
        if isinstance(node, E.Call) and node.fn in FORMAT_FUNCTIONS:
            return self.format_function(idx, node, rec)
        if isinstance(node, E.Call):
            if node.fn in STRUCTURAL:
                self.fail(idx, f"{node.fn} cannot be used here")
            if node.fn not in ELEMENTWISE:
                self.fail(idx, f"unknown function {node.fn!r}; the stage library has "
                               f"{sorted(set(ELEMENTWISE) | STRUCTURAL)}")
            lo, hi = ELEMENTWISE[node.fn]
            if not lo <= len(node.args) <= hi:
                self.fail(idx, f"{node.fn} takes {lo} argument(s), found {len(node.args)}")
            if node.fn == "round_to":
                return self.round_to(idx, node.args[0], rec(node.args[1]))
            args = self.operands(idx, node.args, axes)
            try:
                return _elementwise(node.fn, args)
            except TypeError as e:
                self.fail(idx, f"{node.fn}: {e}")
        self.fail(idx, f"unsupported expression {E.to_source(node)!r}")

    def operands(self, idx, nodes, axes):
        """The IR of an operation's operands. Literals are f32, except that an integer literal next to an
        i32 operand is an i32 constant (`max(e - 6, 0)` on exponents)."""
        args = [self.elementwise(idx, n, axes) for n in nodes]
        if any(a.dtype == I32 for a in args):
            args = [a if _int_literal(n) is None else ir.Const(_int_literal(n), I32) for n, a in zip(nodes, args)]
        return args

    def round_to(self, idx, target, v):
        """round_to(f, v): v rounded to element format f (a format, a param naming one, or an input,
        meaning that input's dtype) and widened back to f32, exactly."""
        if v.dtype != F32:
            self.fail(idx, "round_to rounds float values")
        if isinstance(target, E.Name) and target.id in self.spec.inputs:
            t = self.spec.inputs[target.id]
            if any(dt not in self.elements for dt in t.dtypes):
                self.fail(idx, f"round_to({target.id}, v): {target.id!r} has no float dtype")
            self.rounds.add(target.id)
            return ir.Call(f"ROUND_{target.id}", (v,), F32)
        fmt = self.format_arg(idx, target, self.elements, "element")
        return v if fmt.is_float32 else ir.Call(f"round_{fmt.name}", (v,), F32)

    def keep_rows(self, idx, name, node):
        """keep = keep_rows(c): the rows where the per-row condition c holds are computed and written; the
        others are left untouched (no output element of theirs is stored, their later loads give 0) and
        add nothing to counts and sums over rows. A condition that folds to true keeps every row."""
        if idx != 0:
            self.fail(idx, "keep_rows(c) must be the first statement: every load and store of a row depends on it")
        cond = ir.fold(self.elementwise(idx, node, set()))
        axes = self.axes_of(cond)
        dyn = next(iter(self.spec.axes))
        if cond.dtype != ir.BOOL or (axes and axes != {dyn}) or self.spec.row_inner:
            self.fail(idx, f"keep_rows(c): c must be a condition over the rows alone (axis {dyn!r}; not row blocks)")
        if isinstance(cond, ir.Const):
            if not cond.value:
                self.fail(idx, "keep_rows(c): c is always false, so nothing would be written")
            self.define(idx, name, (), ir.BOOL)
            del self.values[name]
            self.consts[name] = cond
            return
        self.keep = self.define(idx, name, (dyn,), ir.BOOL)
        self.steps.append(Map(self.keep, cond))

    def positions(self, idx, tensor):
        """The loaded positions of a tensor addressed `at:` them (loaded once, as a value of its own)."""
        pos = self.spec.inputs[tensor.at]
        loaded = next((st.out for st in self.steps if isinstance(st, Load) and st.tensor == pos.name and not st.fixed), None)
        if loaded is not None:
            return loaded
        name = f"_at_{pos.name}"
        if name not in self.values:
            self.values[name] = Value(name, pos.axes, I32)
            self.steps.insert(0, Load(self.values[name], pos.name))
        return self.values[name]

    def prune(self, outputs):
        """Drop steps whose value nothing uses (a load whose halves were all taken, the reductions that feed
        only an output this variant does not write)."""
        live = {v.name for v in outputs.values()} | set(self.at.values()) | ({self.keep.name} if self.keep else set())
        kept = []
        for st in reversed(self.steps):
            if st.out.name not in live and isinstance(st, (Load, Map, Reduce, TopK, Count, Gather)):
                continue
            kept.append(st)
            if isinstance(st, (Map, Count)):
                live |= ir.var_names(st.expr)
            elif isinstance(st, (Reduce, TopK)):
                live.add(st.src.name)
            elif isinstance(st, Gather):
                live.add(st.index.name)
        self.steps = kept[::-1]
        for name in [n for n in self.values if n not in live]:
            del self.values[name]

    def format_function(self, idx, node, rec):
        """`min_amax(fmt)`: the format's amax floor, a float32 constant."""
        want = FORMAT_FUNCTIONS[node.fn]
        if len(node.args) != want:
            self.fail(idx, f"{node.fn} takes {want} argument(s), found {len(node.args)}")
        fmt = self.format_arg(idx, node.args[0], self.elements, "element")
        if fmt.min_amax is None:
            self.fail(idx, f"format {fmt.name!r} declares no min_amax")
        return ir.c(fmt.min_amax)

    def finish(self):
        outputs = {}
        self.at = {}
        for name, t in self.spec.outputs.items():
            if not self.spec.writes(t, self.variant):
                continue            # not written in this variant
            if name not in self.values:
                raise StageError(len(self.spec.stages) - 1, f"output {name!r} is never assigned")
            v = self.values[name]
            src = next((st.tensor for st in self.steps if isinstance(st, Copy) and st.out.name == name), None)
            if src is not None and src != t.like:      # a `like` output may also hold computed values
                raise StageError(len(self.spec.stages) - 1, f"output {name!r} must be declared `like: {src}` to hold copy({src})")
            if set(v.axes) != set(t.axes):
                raise StageError(len(self.spec.stages) - 1,
                                 f"output {name!r} varies over {list(v.axes)} but its view has axes {list(t.axes)}")
            if t.at:
                self.at[name] = self.positions(len(self.spec.stages) - 1, t).name
            outputs[name] = v
        self.prune(outputs)
        return Program(self.values, self.steps, outputs, self.whole, self.scalars, self.rounds, self.keep, self.at,
                       self.counts & set(self.values))


def _int_literal(node):
    """The value of an integer literal (or of a negated one), else None."""
    if isinstance(node, E.Unary) and node.op == "-":
        v = _int_literal(node.arg)
        return None if v is None else -v
    if isinstance(node, E.Num) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _elementwise(fn, args) -> ir.Expr:
    if fn in ("max", "min"):
        return op(fn, *args)
    if fn == "abs":
        return op("max", args[0], op("neg", args[0]))
    if fn == "clamp":
        return op("min", op("max", args[0], args[1]), args[2])
    if fn == "where":
        return op("select", *args)
    if fn == "exponent":
        if args[0].dtype != F32:
            raise TypeError("takes a float value")
        return F.exponent_field(args[0])
    if fn == "exp2":
        if args[0].dtype != I32:
            raise TypeError("takes an integer value (an exponent, e.g. from exponent(v)); 2^x of a float is not in the library")
        return F.pow2_of_int(args[0])
    if fn == "sigmoid":
        one = ir.c(1.0)
        return op("div", one, op("add", one, op("exp", op("neg", args[0]))))
    return op(fn, args[0])


def build_program(spec, elements, scales, variant) -> Program:
    b = _Builder(spec, elements, scales, variant)
    for idx, targets, node in _flatten(spec):
        b.statement(idx, targets, node)
    return b.finish()


def typecheck(spec, elements, scales):
    """Check every variant's compute block; errors point at the stage's line in the spec."""
    for variant in spec.variants():
        try:
            build_program(spec, elements, scales, variant)
        except StageError as e:
            raise spec.doc_ref.error(("compute", e.stage_index), e.message) from None
