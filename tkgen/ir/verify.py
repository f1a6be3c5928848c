"""The kernel IR's verifier: what every module must satisfy before and after each schedule pass.

`verify(module, invariants, where)` raises `VerifyError` naming `where` (the pass that produced the
module), the kernel and the statement. It checks, cheaply and without the spec:

- **scopes**: every axis a buffer, statement, tile or index names is an axis of the module; every tensor
  a statement reads or writes is an argument of the module, indexed once per storage dim (once where it is
  flat); every buffer read is written before (in statement order, or anywhere in an enclosing loop: state
  carried from one iteration to the next), explicit indices one per axis; every Var is a loop variable,
  a loop binding, a block variable of the grid (`Kernel.grid`) or the block index `bid` of a persistent
  kernel, in scope;
- **bounds**: a constant index (of a buffer read, a slice write `Compute.at`, a tensor load) is not
  negative and lies below its axis's extent where that is a number;
- **copies**: a bulk copy's box has one (start, axis) per storage dim of its tensor, names each axis at
  most once, only axes of its buffer, in the buffer's order, and its starts do not vary along them; its
  buffer holds the tensor's stored elements (RAW, of the tensor's element type), a stored buffer is
  written before;
- **loops**: a loop's kind is known; a pipelined loop has at least one stage, a loop of another kind none;
- **dtypes**: all declarations of a buffer agree (axes, dtype, scope); what a Compute, Fill or Reduce
  writes has the buffer's dtype; a read has the buffer's dtype; guards are boolean; loop extents integer;
- **guarded** (an invariant, checked from the pass that establishes it on, `guard_out_of_range`): a store
  over an axis whose tile is padded has a guard that names the axis, and the packets of a padded axis
  are padded too;
- **one writer per element** (where it is decidable): a store that is not accumulated, whose value
  varies along an axis it runs over or an axis split across blocks, names that axis in its indices
  (directly, through a buffer read over it, or through the block index) or its guard; else blocks or
  threads would write different values into one element. (Blocks that write the same value, a store
  that does not vary along a split axis, are redundant, not wrong, and pass.)
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Set

from . import kernel as kir
from . import prim as ir
from . import show

INVARIANTS = ("guarded",)


class VerifyError(Exception):
    """A module that breaks a rule of the kernel IR: `where` (the pass), `kernel`, `statement` (text)."""

    def __init__(self, where: str, kernel: str, statement: Optional[str], problem: str):
        self.where, self.kernel, self.statement, self.problem = where, kernel, statement, problem
        at = f", statement `{statement}`" if statement is not None else ""
        super().__init__(f"after {where}: kernel {kernel}{at}: {problem}")


class _Check:
    def __init__(self, module: kir.Module, kernel: kir.Kernel, invariants, where):
        self.m, self.k, self.inv, self.where = module, kernel, set(invariants), where
        self.tensors = {t.name: t for t in module.tensors}
        self.decl: Dict[str, kir.Buffer] = {}
        self.tiles = dict(kernel.tiles)
        self.split = set(kernel.split)
        self.st = None

    def packets_padded(self):
        """The packets of a padded axis are padded too: a packet past the last real one holds only
        padding, and the stores' guards name the packet axis."""
        for name, ax in self.m.axes.items():
            base = ax.packets[0] if ax.packets else None
            if base in self.tiles and self.tiles[base].padded and name in self.tiles and not self.tiles[name].padded:
                self.fail(f"axis {name!r} packs the padded axis {base!r} but its tile is not padded")

    def fail(self, problem):
        raise VerifyError(self.where, self.k.name, None if self.st is None else show.stmt(self.st), problem)

    # -- names ----------------------------------------------------------------------------------------
    def axis(self, a):
        if a not in self.m.axes:
            self.fail(f"axis {a!r} is not an axis of the module")

    def declare(self, b: kir.Buffer):
        for a in b.axes:
            self.axis(a)
        old = self.decl.setdefault(b.name, b)
        if (old.axes, old.dtype, old.scope) != (b.axes, b.dtype, b.scope):
            self.fail(f"buffer {b.name!r} declared twice differently: {show.buffer(old)} and {show.buffer(b)}")

    def expr(self, e, defined: Set[str], vars_: Set[str]):
        for n in ir.walk(e):
            if isinstance(n, ir.Index):
                self.axis(n.axis)
            elif isinstance(n, ir.Var) and n.name not in vars_:
                self.fail(f"variable {n.name!r} is not in scope")
            elif isinstance(n, ir.Read):
                self.read(n.buffer, defined, n.dtype)
                if n.indices is not None and len(n.indices) != len(self.decl[n.buffer].axes):
                    self.fail(f"buffer {n.buffer!r} read with {len(n.indices)} indices, it has "
                              f"{len(self.decl[n.buffer].axes)} axes")
                if n.indices is not None:
                    self.bounds(zip(self.decl[n.buffer].axes, n.indices), f"buffer {n.buffer!r}")
                if n.guard is not None:
                    self.boolean(n.guard, "a read's guard")
            elif isinstance(n, ir.Fetch):
                self.tensor(n.tensor, n.indices)
                self.bounds(((None, i) for i in n.indices), f"tensor {n.tensor!r}")
                if n.guard is not None:
                    self.boolean(n.guard, "a load's guard")

    def read(self, name, defined, dtype=None):
        if name not in defined or name not in self.decl:
            self.fail(f"buffer {name!r} is read before it is written")
        if dtype is not None and dtype != self.decl[name].dtype:
            self.fail(f"buffer {name!r} ({self.decl[name].dtype}) read as {dtype}")

    def tensor(self, name, indices):
        t = self.tensors.get(name)
        if t is None:
            self.fail(f"tensor {name!r} is not an argument of the module")
        want = 1 if t.flat else len(t.shape)
        if len(indices) != want:
            self.fail(f"tensor {name!r} indexed with {len(indices)} indices, its storage has {want} dims")

    def bounds(self, pairs, what):
        """Constant indices lie inside their axis: not negative, and below the axis's extent where that is
        a number (`pairs`: (axis or None, index))."""
        for a, i in pairs:
            k = _number(i)
            if k is None:
                continue
            hi = _number(self.m.axes[a].extent) if a in self.m.axes else None
            if k < 0 or (hi is not None and k >= hi):
                self.fail(f"{what} indexed at {k}, outside axis {a!r} (extent {hi})" if hi is not None else
                          f"{what} indexed at {k}, a negative index")

    def boolean(self, e, what):
        if e.dtype != ir.BOOL:
            self.fail(f"{what} is {e.dtype}, not bool")

    # -- statements -----------------------------------------------------------------------------------
    def body(self, stmts, defined: Set[str], vars_: Set[str]):
        for st in stmts:
            self.st = st
            self.stmt(st, defined, vars_)

    def stmt(self, st, defined, vars_):
        for b in _buffers(st):
            self.declare(b)
        if isinstance(st, kir.Compute):
            for a, e in st.at:
                self.axis(a)
                self.expr(e, defined, vars_)
            self.bounds(st.at, f"buffer {st.dst.name!r}")
            self.expr(st.value, defined | ({st.dst.name} if st.dst.name in defined else set()), vars_)
            self.same(st.value.dtype, st.dst)
            defined.add(st.dst.name)
        elif isinstance(st, kir.Store):
            for a in st.axes:
                self.axis(a)
            for e in st.indices + (st.value,) + (() if st.guard is None else (st.guard,)):
                self.expr(e, defined, vars_)
            self.tensor(st.tensor, st.indices)
            if st.guard is not None:
                self.boolean(st.guard, "a store's guard")
            self.store(st)
        elif isinstance(st, kir.Reduce):
            self.axis(st.axis)
            if st.kind not in kir.REDUCE_KINDS:
                self.fail(f"unknown reduction {st.kind!r}")
            self.read(st.src.name, defined)
            if st.accumulate:
                self.read(st.dst.name, defined)
            if st.axis not in st.src.axes:
                self.fail(f"reduction over {st.axis!r}, which {st.src.name!r} does not have")
            self.same(st.src.dtype, st.dst)
            defined.add(st.dst.name)
        elif isinstance(st, kir.Fill):
            self.same(st.value.dtype, st.dst)
            defined.add(st.dst.name)
        elif isinstance(st, kir.Scan):
            self.axis(st.axis)
            self.read(st.src.name, defined)
            defined.add(st.dst.name)
        elif isinstance(st, kir.Gemm):
            self.axis(st.k)
            self.read(st.a.name, defined)
            self.read(st.b.name, defined)
            if st.accumulate:
                self.read(st.c.name, defined)
            defined.add(st.c.name)
        elif isinstance(st, kir.Copy):
            self.copy(st, defined, vars_)
        elif isinstance(st, kir.Loop):
            if st.kind not in kir.LOOP_KINDS:
                self.fail(f"unknown loop kind {st.kind!r}")
            if (st.kind == "pipelined") != (st.stages >= 1):
                self.fail(f"a {st.kind} loop with {st.stages} stages (a pipelined loop has at least 1, "
                          "others none)")
            self.expr(st.extent, defined, vars_)
            if st.extent.dtype not in ir.INTS:
                self.fail(f"loop extent is {st.extent.dtype}")
            inner = vars_ | {st.var}
            for name, e in st.binds:
                self.expr(e, defined, inner)
                inner = inner | {name}
            # state carried from one iteration to the next: what the body writes is defined in it
            carried = defined | set().union(*map(kir.writes, st.body))
            self.body(st.body, carried, inner)
            self.st = st
            defined |= set().union(*map(kir.writes, st.body))
        elif isinstance(st, kir.Nest):
            for a in st.axes:
                self.axis(a)
            self.body(st.body, defined, vars_)
            self.st = st

    def copy(self, st: kir.Copy, defined, vars_):
        t = self.tensors.get(st.tensor)
        self.tensor(st.tensor, st.box)
        if st.buf.dtype != ir.RAW or st.buf.elem != t.elem:
            self.fail(f"buffer {st.buf.name!r} copied from or to tensor {st.tensor!r} must hold its stored elements "
                      f"(raw {t.elem}), not {st.buf.dtype}{'' if st.buf.elem is None else ' ' + st.buf.elem}")
        named = [a for _, a in st.box if a is not None]
        if len(set(named)) != len(named) or not set(named) <= set(st.buf.axes):
            self.fail(f"the box names axes {named}: each at most once, and only axes of {st.buf.name!r} "
                      f"{list(st.buf.axes)}")
        if named != [a for a in st.buf.axes if a in named]:
            self.fail(f"the box names axes {named} in another order than buffer {st.buf.name!r} holds them")
        if not named:
            self.fail("a copy whose box names no axis")
        if st.instruction not in kir.COPY_INSTRUCTIONS:
            self.fail(f"unknown copy instruction {st.instruction!r} (one of {kir.COPY_INSTRUCTIONS[1:]})")
        for e, _ in st.box:
            self.expr(e, defined, vars_)
            if _index_axes(e) & set(named):
                self.fail(f"a start varies along an axis the box runs over: {show.expr(e)}")
        self.bounds(((None, e) for e, _ in st.box), f"tensor {st.tensor!r}")
        if st.store:
            self.read(st.buf.name, defined)
        else:
            defined.add(st.buf.name)

    def same(self, dtype, dst: kir.Buffer):
        if dtype != dst.dtype:
            self.fail(f"{dtype} written into buffer {dst.name!r} of dtype {dst.dtype}")

    def store(self, st: kir.Store):
        guarded = _index_axes(st.guard) if st.guard is not None else set()
        if "guarded" in self.inv:
            missing = [a for a in st.axes if self.tiles.get(a) is not None and self.tiles[a].padded
                       and a not in guarded]
            if missing:
                self.fail(f"store over padded axes {missing} without a guard that names them")
        if st.accumulate:
            return
        named = set(guarded) | self.axes_of(st.indices)
        if any(isinstance(n, ir.Var) for e in st.indices for n in ir.walk(e)):
            named |= self.split          # the block index, or a loop's binding of the block
        varies = self.axes_of((st.value,))
        free = [a for a in list(st.axes) + sorted(self.split - set(st.axes)) if a in varies and a not in named]
        if free:
            self.fail(f"several writers per element: the value varies along {free}, which the indices do not "
                      f"name (an unaccumulated store)")

    def axes_of(self, exprs) -> Set[str]:
        """The axes expressions vary over: the indices they name and the axes of the buffers they read."""
        out = set()
        for e in exprs:
            for n in ir.walk(e):
                if isinstance(n, ir.Index):
                    out.add(n.axis)
                elif isinstance(n, ir.Read) and n.indices is None and n.buffer in self.decl:
                    out |= set(self.decl[n.buffer].axes)
        return out


def _number(e) -> Optional[int]:
    """The integer an index or extent is where it is a constant (an ir.Const, or a number of the spec's
    size expressions), else None."""
    v = getattr(e, "value", None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _buffers(st):
    if isinstance(st, (kir.Compute, kir.Fill)):
        return (st.dst,)
    if isinstance(st, (kir.Reduce, kir.Scan)):
        return (st.dst, st.src)
    if isinstance(st, kir.Gemm):
        return (st.a, st.b, st.c)
    if isinstance(st, kir.Copy):
        return (st.buf,)
    return ()


def _index_axes(e) -> Set[str]:
    return {n.axis for n in ir.walk(e) if isinstance(n, ir.Index)}


def verify(module: kir.Module, invariants: Iterable[str] = (), where: str = "a pass"):
    """Raise VerifyError where `module` breaks a rule (see the module docstring); `invariants`: those of
    INVARIANTS that the passes run so far have established."""
    for kernel in module.kernels:
        c = _Check(module, kernel, invariants, where)
        for a, _ in kernel.tiles:
            c.axis(a)
        if "guarded" in c.inv:
            c.packets_padded()
        vars_ = ({"bid"} if kernel.persistent else set()) | {ir.tile_var(a) for a in kernel.grid}
        for a in kernel.grid:
            c.axis(a)
        c.body(kernel.body, set(), vars_)
