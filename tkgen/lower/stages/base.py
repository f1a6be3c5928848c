"""What every stage shares: values, program steps, the program, errors, and the registry of stages.

A *stage* is a function of the `compute:` language (`load`, `absmax`, `topk`, `exp`, ...). Its class holds
its type rule and its expansion (`build`: check the call, append program steps), and the steps it
produces hold their lowering to the kernel IR (`Step.lower`). The registry maps the names a spec writes to
these classes, so that adding a stage is adding a class in one of the family modules:

- `STAGES`: statement-level stages (a call that produces values of its own: `load`, `sum`, `topk`, ...),
  hoisted out of the expressions they are written in;
- `FUNCTIONS`: elementwise functions (`exp`, `where`, `fma`, ...), which build primitive IR (tkgen/ir/prim.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ...spec import expr as E
from ...ir import prim as ir

RAW = "raw"                    # the dtype of `copy` values: stored elements, moved bit for bit
INTS = (ir.I32, ir.I64)        # the integer dtypes values may have


@dataclass(frozen=True)
class Value:
    name: str
    axes: Tuple[str, ...]      # in the op's axis order
    dtype: str                 # ir dtype: f32 | i32 | i64 | bool, or RAW


class StageError(ValueError):
    """A compute statement that cannot be built or lowered: its index in `compute:`, the message, and the
    column inside the statement's text where that is known."""

    def __init__(self, stage_index, message, col=0, field_path=None):
        self.stage_index, self.message, self.col = stage_index, message, col
        self.field_path = field_path        # where the error is reported, when not at the statement
        super().__init__(message)


class Step:
    """One step of a stage program. Subclasses are frozen dataclasses with an `out` value; `stage_index` is the
    compute statement the step comes from (set by the builder, not part of the step's value)."""

    stage_index = -1
    prunable = True            # dropped when nothing uses its value
    copies = False             # holds an input's stored elements (`copy`), not values

    def sources(self) -> set:
        """The names of the values the step reads."""
        return set()

    def lower(self, lw) -> None:
        """Append the step's kernel-IR statements to `lw` (a tkgen.lower.lowering.Lowering)."""
        raise NotImplementedError(type(self).__name__)

    def work(self, size, extent) -> int:
        """Operations of one call (tkgen/lower/cost.py): `size(axes)` elements over axes, `extent(axis)`."""
        return 0

    def accumulates(self, dyn_axis) -> bool:
        """Whether every block adds its part of this value into the output that stores it."""
        return False


def expr_work(e) -> int:
    """One count per IR operation (a helper call counts as one)."""
    return int(isinstance(e, (ir.Op, ir.Call))) + sum(expr_work(a) for a in ir.children(e))


@dataclass
class Program:
    """One variant of an op as steps over named values; outputs map tensor names to values."""

    values: Dict[str, Value]
    steps: List[Step]
    outputs: Dict[str, Value]
    whole_axes: set = field(default_factory=set)   # axes that a block must hold entirely
    scalars: Dict[str, str] = field(default_factory=dict)   # params and dims used as values: name -> param|dim
    rounds: set = field(default_factory=set)       # inputs whose dtype a `round_to(input, v)` rounds to
    keep: Value = None                             # keep_rows: the rows that are written (None: every row)
    at: Dict[str, str] = field(default_factory=dict)   # output addressed `at:` positions -> the positions' value
    counts: set = field(default_factory=set)       # values summed over every block: counts and joins of them
    sizes: dict = field(default_factory=dict)      # integer values of params and dims: name -> spec expression
    filled: set = field(default_factory=set)       # outputs at positions with a `fill`: stored, not added

    def accumulated(self, dyn_axis) -> set:
        """Outputs that every block adds into, so they start at 0: sums over the dynamic axis, counts, and
        outputs addressed `at:` positions."""
        sums = {st.out.name for st in self.steps if st.accumulates(dyn_axis)} | self.counts
        return {t for t, v in self.outputs.items() if v.name in sums or (t in self.at and t not in self.filled)}

    @property
    def used_axes(self) -> set:
        """Axes some value varies over (an axis only held at a fixed index by `take` is not one)."""
        return {a for v in self.values.values() for a in v.axes}


@dataclass(frozen=True)
class Call:
    """One statement being built: `targets = fn(args)`, from compute statement `index`."""

    index: int
    fn: str
    targets: Tuple[str, ...]
    args: Tuple[E.Node, ...]
    col: int = 0


class Stage:
    """A statement-level stage: the `names` it is written as, the kinds of its arguments (`args`: "input",
    "value", "axis", "node" for an expression as written, "element" or "scale" for a format; one kind may
    end in `*` for one or more such arguments, or in `?` for an optional one), how many `targets` it
    assigns; `build` gets the call and its parsed arguments, checks them and appends the stage's steps."""

    names: Tuple[str, ...] = ()           # set by @stage
    args: Tuple[str, ...] = ("node",)
    targets = 1
    # whether the statement acts by being there (which rows are written), so that its value needs no reader
    acts = False

    def kinds(self, n) -> Optional[Tuple[str, ...]]:
        """The kind of each of `n` arguments, or None when `n` arguments do not fit."""
        many = [i for i, k in enumerate(self.args) if k[-1] in "*?"]
        if not many:
            return self.args if n == len(self.args) else None
        i = many[0]
        extra = n - len(self.args) + 1
        if extra < (1 if self.args[i].endswith("*") else 0) or (self.args[i].endswith("?") and extra > 1):
            return None
        return self.args[:i] + (self.args[i][:-1],) * extra + self.args[i + 1:]

    def arity_problem(self, fn, n):
        """Why `n` arguments do not fit, or None."""
        if self.kinds(n) is not None:
            return None
        fixed = len(self.args) - any(k[-1] in "*?" for k in self.args)
        if any(k.endswith("*") for k in self.args):
            return f"{fn} takes at least {fixed + 1} arguments, found {n}"
        if any(k.endswith("?") for k in self.args):
            return f"{fn} takes {fixed} or {fixed + 1} arguments, found {n}"
        return f"{fn} takes {len(self.args)} arguments, found {n}"

    def build(self, b, call: Call, *args) -> None:
        raise NotImplementedError(type(self).__name__)


class Function:
    """An elementwise function of expressions: `names`, `arity`, and `build`, which returns primitive IR
    for a call (`b.operands(...)` gives the IR of its arguments)."""

    names: Tuple[str, ...] = ()           # set by @function
    arity: Tuple[int, int] = (1, 1)

    def build(self, b, idx, node: E.Call, axes: set) -> ir.Expr:
        raise NotImplementedError(type(self).__name__)


STAGES: Dict[str, type] = {}
FUNCTIONS: Dict[str, type] = {}


def _register(table, cls, names):
    for n in names:
        if n in STAGES or n in FUNCTIONS:
            raise ValueError(f"stage {n!r} is registered twice")
        table[n] = cls
    cls.names = names
    return cls


def stage(*names, args=("node",), targets=1):
    """Register a statement-level stage class under `names` (see Stage for `args` and `targets`)."""
    def register(cls):
        cls.args, cls.targets = tuple(args), targets
        return _register(STAGES, cls, names)
    return register


def function(*names, arity=1):
    """Register an elementwise function class under `names`, taking `arity` arguments."""
    def register(cls):
        cls.arity = (arity, arity)
        return _register(FUNCTIONS, cls, names)
    return register


def order(spec, axes) -> Tuple[str, ...]:
    """Axes in the op's declaration order."""
    return tuple(a for a in spec.axes if a in axes)
