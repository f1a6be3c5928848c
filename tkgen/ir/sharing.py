"""The subexpressions a statement computes more than once, to be bound once (a let) before it.

Stages build values by composition, so one value often appears several times in a statement's tree: each
step of a bit reversal uses its operand twice (16 copies after four steps), a stochastic rounding reads its
exponent in five places, a decoder its code in each branch. The printers print trees, so TVM's passes and
the compilers walk every copy (a stochastic cast's hash took TileLang 30 s to lower for the C target).
`shared_subtrees` picks the repeated subtrees worth a name; the kernel printer binds each once.

A let is evaluated unconditionally, where the tree may evaluate a subtree only in one branch of a select
or under a guard. So a subtree is bound only where evaluating it cannot fault: it appears somewhere outside
every branch and guard, or it holds no memory access at computed indices, no integer division by a computed
divisor, no shift by a computed amount and no float-to-integer conversion. Values inside the cases of a
`Choose` are never bound (a case may name buffers that only its own variant has).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from . import prim as ir

MIN_NODES = 6        # smaller repeated trees are cheaper printed twice than named


class _Node:
    __slots__ = ("expr", "kids", "size", "free", "uncond", "index", "faults")

    def __init__(self, expr, kids, size, faults):
        self.expr, self.kids, self.size, self.faults = expr, kids, size, faults
        self.free = self.uncond = self.index = False


def _own_fault(e) -> bool:
    """Whether evaluating this node itself (its children aside) can fault or be undefined."""
    if isinstance(e, ir.Read):
        return e.indices is not None and e.guard is None
    if isinstance(e, ir.Fetch):
        return e.guard is None
    if isinstance(e, ir.Op):
        if e.op in ("floordiv", "floormod", "div") and e.dtype in ir.INTS:
            return not isinstance(e.args[1], ir.Const) or e.args[1].value == 0
        if e.op in ("shl", "shr"):
            return not isinstance(e.args[1], ir.Const)
        if e.op in ("to_i32", "to_i64", "to_u32") and e.args[0].dtype in ir.FLOATS:
            return True
    return False


def _index_kids(e) -> range:
    """The positions of the node's children that are indices of the element it reads."""
    if isinstance(e, ir.Read) and e.indices is not None or isinstance(e, ir.Fetch):
        return range(len(e.indices))
    return range(0)


def _conditional_kids(e, n_kids) -> range:
    """The positions of the node's children that are evaluated only on a condition: the branches of a
    select, and what a guard protects (the guard itself is evaluated)."""
    if isinstance(e, ir.Op) and e.op == "select":
        return range(1, 3)
    if isinstance(e, (ir.Read, ir.Fetch)) and e.guard is not None:
        return range(0, n_kids - 1)
    if isinstance(e, ir.Decode) and isinstance(e.arg, ir.Fetch) and e.arg.guard is not None:
        return range(0, 1)        # printed as the guard around the decoded element
    return range(0)


class _Dag:
    """The statement's trees with equal subtrees merged (keyed by their children's ids, so that a tree with
    shared objects costs its distinct nodes, not its printed size). A node's children precede it."""

    def __init__(self):
        self.by_obj: Dict[int, int] = {}
        self.by_key: Dict[tuple, int] = {}
        self.nodes: List[_Node] = []
        self._keep = []          # the objects whose ids are keys of by_obj

    def intern(self, e) -> int:
        hit = self.by_obj.get(id(e))
        if hit is not None:
            return hit
        kids = tuple(self.intern(k) for k in ir.children(e))
        if isinstance(e, ir.Op):
            key = ("op", e.op, e.dtype, kids)
        elif isinstance(e, ir.Call):
            key = ("call", e.fn, e.dtype, kids)
        elif isinstance(e, ir.Read):
            key = ("read", e.buffer, e.dtype, e.indices is None, e.guard is None, kids)
        elif isinstance(e, ir.Fetch):
            key = ("fetch", e.tensor, e.dtype, e.view, e.guard is None, kids)
        elif isinstance(e, (ir.Decode, ir.Encode)):
            key = (type(e).__name__, e.elem, e.dtype, kids)
        elif isinstance(e, ir.Choose):
            key = ("choose", e.param, tuple(v for v, _ in e.cases), kids)
        else:
            key = ("leaf", e)
        i = self.by_key.get(key)
        if i is None:
            i = len(self.nodes)
            size = 1 + sum(self.nodes[k].size for k in kids)
            faults = _own_fault(e) or any(self.nodes[k].faults for k in kids)
            self.nodes.append(_Node(e, kids, size, faults))
            self.by_key[key] = i
        self.by_obj[id(e)] = i
        self._keep.append(e)
        return i

    def reach(self, root: int, index=False):
        """Note how each node is reached from the root: outside every Choose case (`free`), and moreover
        outside every select branch and guard (`uncond`); inside an index of an element read or written
        (`index`: TileLang infers a fragment's layout from the loop variables in its indices, so those stay
        written out)."""
        stack = [(root, True, True, index)]
        while stack:
            i, free, uncond, index = stack.pop()
            n = self.nodes[i]
            if not ((free and not n.free) or (uncond and not n.uncond) or (index and not n.index)):
                continue           # nothing new to tell its subtree
            n.free, n.uncond, n.index = n.free or free, n.uncond or uncond, n.index or index
            e = n.expr
            cond, at = _conditional_kids(e, len(n.kids)), _index_kids(e)
            k_free = free and not isinstance(e, ir.Choose)
            for pos, k in enumerate(n.kids):
                stack.append((k, k_free, uncond and k_free and pos not in cond, index or pos in at))


class Bindings:
    """The subtrees of a statement's expressions (`roots`, and the `indices` it writes at) to bind before it, each before the ones that use it:
    those that would be printed more than once, of at least `min_nodes` nodes, that may be evaluated
    unconditionally (module doc). `repeats(node)`: how often the printed node repeats each of its children
    (a helper that is a Python function, not a macro, prints its argument at each use: a packed code's
    decoder reads the code in every branch). `name_of` finds a bound subtree's name while the statement prints, by object
    (any object of the roots' trees), so that printing costs no hashing of trees."""

    def __init__(self, roots: Sequence[ir.Expr], indices: Sequence[ir.Expr] = (), min_nodes: int = MIN_NODES,
                 repeats: Callable[[ir.Expr], int] = lambda e: 1):
        self._dag = dag = _Dag()
        ids = [dag.intern(r) for r in (*roots, *indices)]
        for j, i in enumerate(ids):
            dag.reach(i, index=j >= len(roots))
        prints = [0] * len(dag.nodes)       # how often each node is printed, given the bindings above it
        for i in ids:
            prints[i] += 1
        bound = []
        for i in reversed(range(len(dag.nodes))):
            n = dag.nodes[i]
            if not prints[i]:
                continue
            bind = prints[i] > 1 and n.size >= min_nodes and n.free and (n.uncond or not n.faults) \
                and not n.index and n.expr.dtype != ir.RAW
            if bind:
                bound.append(i)
            for k in n.kids:
                prints[k] += (1 if bind else prints[i]) * repeats(n.expr)
        self._order = bound[::-1]
        self._names: Dict[int, str] = {}

    @property
    def subtrees(self) -> List[ir.Expr]:
        return [self._dag.nodes[i].expr for i in self._order]

    def name(self, k: int, name: str):
        """Name the k-th subtree (in the order of `subtrees`) once its binding is printed."""
        self._names[self._order[k]] = name

    def name_of(self, e) -> Optional[str]:
        i = self._dag.by_obj.get(id(e))
        return None if i is None else self._names.get(i)


def shared_subtrees(roots: Sequence[ir.Expr], indices: Sequence[ir.Expr] = (), min_nodes: int = MIN_NODES):
    """The subtrees that a statement binds before it (`Bindings`)."""
    return Bindings(roots, indices, min_nodes).subtrees
