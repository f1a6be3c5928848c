"""The kernel IR: what an operator variant runs, as typed data between the stage program and the printers.

A `Module` is one variant of an op: its axes, the tensors it reads and writes (with their storage), and one
or more `Kernel`s that run one after another (later kernels read what earlier ones wrote to scratch
tensors). A kernel is a list of statements over axes:

- `Compute(dst, value)`: every element of a tile buffer (`dst` over its axes) from an `ir.Expr`;
- `Store(tensor, indices, value, axes)`: every element over `axes` into a tensor (or added into it);
- `Reduce(dst, src, axis, kind)`: a reduction of a buffer over one of its axes;
- `Loop(var, extent, body)`: a serial, unrolled or pipelined loop, whose body may update buffers
  (carried state: the top-k rounds, a streamed axis, the tiles of a persistent block);
- `Gemm`, `Scan`, `Fill`: a tile matmul, a prefix sum along an axis, a buffer set to a constant;
- `Copy(tensor, box, buf, store)`: a rectangular box of a tensor copied into a buffer in bulk, or back
  (made by the schedule: tkgen/schedule/bulk_copies.py).

Expressions read buffers (`ir.Read`), tensors (`ir.Fetch`) and axis indices (`ir.Index`). A statement
over axes means: for every index of those axes. The *naive* module holds every axis whole, with one block;
the PyTorch reference prints it on whole tensors. A schedule (tkgen/schedule/: a pipeline of passes) rewrites it for a target:
it splits axes across blocks (`Kernel.tiles`), pads axes, goes persistent, streams axes, places buffers
and fuses loops; the TileLang printer prints the result.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple, Union

from . import prim as ir

SCOPES = ("tile", "shared", "var")
REDUCE_KINDS = ("absmax", "max", "min", "sum")
LOOP_KINDS = ("serial", "unroll", "pipelined", "static")
COPY_INSTRUCTIONS = ("", "tma", "cp_async", "sync")


@dataclass(frozen=True)
class Axis:
    """An index space. `packets`: (axis, n): index p stands for the n indices p*n .. p*n+n-1 of that axis
    (the words of a packed output), so it is tiled with it.

    What the schedule needs to know of the program, set by the lowering (so that no pass reads the spec
    or the stage program): `used`, whether statements run over the axis (an axis only indexed at fixed
    positions has no tile); `whole`, whether a block must hold it entirely (a reduction, a top-k, a scan
    over it); `counted`, whether a count runs along it (also held whole); `view_inner`, whether it is an
    inner part of a tensor dim that several axes make up (only the major part is tiled); `read_along`,
    whether an input varies along it;
    `extent_max`, the largest extent the spec declares for it (the max of the param it is), if any."""

    name: str
    extent: ir.Expr
    packets: Optional[Tuple[str, int]] = None
    used: bool = True
    whole: bool = False
    counted: bool = False
    view_inner: bool = False
    read_along: bool = False
    extent_max: Optional[int] = None


@dataclass(frozen=True)
class Buffer:
    """A tile: one dim per axis (its block extent in a kernel, its whole extent in the reference).

    `dtype`: an ir dtype, or ir.RAW for stored elements of element type `elem`. `scope`: `tile` (registers:
    fragments on CUDA, thread-local arrays on the C target), `shared` (threads exchange elements through
    it), `var` (one scalar). `pad`: bytes added to the last dim (bank padding of a staging buffer).
    `pad_safe`: what the buffer holds past an axis's extent never decides a reduction over it (its
    algorithm sees to that), so a schedule that pads the axis need not mask it there."""

    name: str
    axes: Tuple[str, ...]
    dtype: str
    scope: str = "tile"
    elem: Optional[str] = None
    pad: int = 0
    pad_safe: bool = False


@dataclass(frozen=True)
class TensorArg:
    """A kernel argument: an input, an output, or a scratch tensor a later kernel reads. `shape`: its
    storage shape (packed last dims, column-major layouts transposed and padded); `elem`: its element
    type (a format, an integer dtype, a packing word, or `@x`); `flat`: passed as one dim of `n_<name>`
    elements (tensors addressed at positions)."""

    name: str
    role: str
    elem: str
    shape: Tuple[object, ...]
    flat: bool = False
    scale: bool = False                    # holds scales (stored where computed, never staged)
    strides: Optional[Tuple[object, ...]] = None   # per dim, its stride (runtime sizes, the last 1); None: dense


@dataclass(frozen=True)
class Compute:
    """dst[...] = value for every index of dst's axes, except those pinned by `at` (axis, index): a slice."""

    dst: Buffer
    value: ir.Expr
    at: Tuple[Tuple[str, ir.Expr], ...] = ()

    @property
    def axes(self):
        pinned = {a for a, _ in self.at}
        return tuple(a for a in self.dst.axes if a not in pinned)


@dataclass(frozen=True)
class Store:
    """tensor[indices] = value for every index of `axes` (the loop order, outermost first) where `guard`
    holds; `accumulate`: added into the tensor (atomically on CUDA, where several blocks add into one
    element). `view`: as for ir.Fetch, the axis groups of the indices when they are the tensor's view."""

    tensor: str
    indices: Tuple[ir.Expr, ...]
    value: ir.Expr
    axes: Tuple[str, ...]
    guard: Optional[ir.Expr] = None
    accumulate: bool = False
    view: Optional[Tuple[Tuple[object, ...], ...]] = None


@dataclass(frozen=True)
class Reduce:
    """dst = reduction `kind` of src over `axis` (dst has src's other axes). `accumulate`: combined with
    the value dst holds (a reduction over chunks, or over the tiles of a persistent block)."""

    dst: Buffer
    src: Buffer
    axis: str
    kind: str
    accumulate: bool = False


@dataclass(frozen=True)
class Fill:
    """Every element of a buffer set to a constant (the start of an accumulation or of a carried state)."""

    dst: Buffer
    value: ir.Const


@dataclass(frozen=True)
class Loop:
    """for var in range(extent): body. `kind`: serial, unroll (only while the extent is at most `limit`,
    when one is given), pipelined (with `stages`), or static (unrolled when the kernel is built: each
    iteration's index a constant, so what it decides folds, and empty iterations vanish). `binds`: (name, value) bound at the top of each
    iteration (a persistent block's tile index)."""

    var: str
    extent: ir.Expr
    body: Tuple["Stmt", ...]
    kind: str = "serial"
    stages: int = 0
    limit: int = 0
    binds: Tuple[Tuple[str, ir.Expr], ...] = ()


@dataclass(frozen=True)
class Scan:
    """dst = the prefix sum of src along `axis` (inclusive, or exclusive: starting from 0)."""

    dst: Buffer
    src: Buffer
    axis: str
    exclusive: bool = False


@dataclass(frozen=True)
class Gemm:
    """c (+)= a @ b over the shared axis `k`: a over (m, k), b over (n, k) or (k, n), c over (m, n)."""

    a: Buffer
    b: Buffer
    c: Buffer
    k: str
    accumulate: bool = False


@dataclass(frozen=True)
class Copy:
    """A bulk copy between a rectangular box of `tensor` (its storage) and the buffer `buf`, which holds
    stored elements (`buf.dtype` RAW, `buf.elem` the tensor's `elem`).

    `box`: one (start, axis) per storage dim of the tensor: the dim's indices `start + i` for every index
    `i` of `axis` (an axis of `buf`), or the one index `start` where `axis` is None. Buffer axes that no
    dim names are *looped*: the copy runs once per index of each (their `ir.Index` may appear in the
    starts), the others move as one box. The axes the box names appear in `buf.axes` in the order of the
    dims that name them (no transposition).

    `store` False: for every element of `buf`, the tensor's element, where it lies inside the tensor, and
    the storage's zero past the tensor's end (TileLang's `T.copy` predicates each dim against the tensor's
    shape; TMA fills such elements with zeros). `store` True: the buffer's elements written into the
    tensor, those past its end dropped. A box that reaches past what a kernel may read must be masked
    where the buffer is read (the pass that makes copies keeps each load's guard there)."""

    tensor: str
    box: Tuple[Tuple[ir.Expr, Optional[str]], ...]
    buf: Buffer
    store: bool = False
    # the instruction TileLang is asked to move it with on CUDA (`prefer_instruction`: tma, cp_async, sync);
    # empty: TileLang's choice (0.1.15: vector loads into shared memory, TMA for stores)
    instruction: str = ""

    @property
    def looped(self) -> Tuple[str, ...]:
        named = {a for _, a in self.box if a is not None}
        return tuple(a for a in self.buf.axes if a not in named)


@dataclass(frozen=True)
class Nest:
    """One parallel loop over `axes` (outermost first) running elementwise statements in order: Computes
    and Stores that a schedule fused (tkgen/schedule/loops.py: fuse)."""

    axes: Tuple[str, ...]
    body: Tuple[Union[Compute, Store], ...]
    # where the loop is laid out for a store: the stored element's bytes (the knob `vector_bytes` divided by
    # it is the elements per thread and access; 0: free)
    vector: int = 0


Stmt = Union[Compute, Store, Reduce, Fill, Loop, Scan, Gemm, Copy, Nest]


@dataclass(frozen=True)
class Tile:
    """How a kernel holds an axis: `block` elements per tile (an ir size; None: the whole extent), split
    across blocks or not, padded to a power of two or not, or `streamed`: one chunk of `block` at a time,
    in a loop over the chunks (tkgen/schedule/stream.py)."""

    block: Optional[ir.Expr] = None
    split: bool = False
    padded: bool = False
    streamed: bool = False


@dataclass(frozen=True)
class Kernel:
    """One launch. `tiles`: per axis how it is held (absent: whole); `persistent`: a fixed number of
    blocks (the knob `blocks`) loop over the tiles of the axes in `Kernel.split`."""

    name: str
    body: Tuple[Stmt, ...]
    tiles: Tuple[Tuple[str, Tile], ...] = ()
    persistent: bool = False
    threads: Optional[ir.Expr] = None
    # the split axes the grid runs over, outermost first: one block per tile, its index along axis `a` the
    # variable `ir.tile_var(a)` (set by the pass index_tiles; a persistent kernel's loop binds it instead)
    grid: Tuple[str, ...] = ()

    def tile(self, axis) -> Tile:
        return dict(self.tiles).get(axis, Tile())

    @property
    def split(self) -> Tuple[str, ...]:
        return tuple(a for a, t in self.tiles if t.split)


@dataclass(frozen=True)
class SizeSamples:
    """Sizes the spec admits, for passes that bound what a block holds (tkgen/schedule/tile_bytes.py): each
    a tuple of (name, value) for every dim and integer param; `named` at the sizes the spec names, `extreme`
    with each dim's max as well (tkgen/spec/checks.py: admitted_sizes). `dynamic`: the dynamic dim, if any;
    `unbounded`: the dims without a max."""

    named: Tuple[Tuple[Tuple[str, int], ...], ...]
    extreme: Tuple[Tuple[Tuple[str, int], ...], ...]
    dynamic: Optional[str] = None
    unbounded: frozenset = frozenset()


@dataclass
class Module:
    """One variant of an op: axes, tensors, kernels, and what the factory checks and exposes."""

    op: str
    variant: str
    axes: Dict[str, Axis]
    tensors: Tuple[TensorArg, ...]
    kernels: Tuple[Kernel, ...]
    dims: Tuple[str, ...]                  # static dims and params the factory takes, in order
    dtype_args: Tuple[str, ...] = ()       # inputs whose dtype the factory takes (`<input>_dtype`)
    dynamic: Tuple[str, ...] = ()          # runtime sizes: the rows' dim and the numels of flat tensors
    checks: Tuple[Tuple[ir.Expr, str], ...] = ()
    knobs: Tuple[Tuple[str, object], ...] = ()
    keep: Optional[str] = None             # the buffer of kept rows (keep_rows), if any
    dyn: Optional[str] = None              # the row axis (over the dynamic dim), if any
    row_inner: Optional[str] = None        # the rows inside a row block, where the row axis is ceildiv(T, n)
    samples: Optional[SizeSamples] = None  # sizes the spec admits
    # the carried sums of prefixes along the rows (tkgen/schedule/row_scans.py splits the kernel for them)
    row_carries: Tuple[str, ...] = ()
    # the params the kernels take as arguments after the tensors (`runtime: true`): (name, dtype)
    scalar_args: Tuple[Tuple[str, str], ...] = ()
    # what the printers read besides the statements: generated helpers the kernels call, each tensor's
    # signature (tkgen/spec/signature.py: TensorSig), the dtypes an input of several may have, and the sizes
    # the spec's `sizes:` defines (name, expression), in order
    helpers: frozenset = frozenset()
    sigs: Dict[str, object] = field(default_factory=dict)
    dtypes: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    sizes: Tuple[Tuple[str, object], ...] = ()
    # TileLang pass configs the kernels need besides the profile's (name, value): set by a pass whose
    # statements TileLang lowers only with them (tkgen/schedule/pipelined.py), merged into the knob table
    pass_configs: Tuple[Tuple[str, object], ...] = ()

    def tensor(self, name) -> TensorArg:
        return next(t for t in self.tensors if t.name == name)

    def replace(self, **kw) -> "Module":
        return dataclasses.replace(self, **kw)

    def rewrite_kernels(self, fn) -> "Module":
        """The module with every kernel's body replaced by `fn(body)`."""
        return self.replace(kernels=tuple(dataclasses.replace(k, body=tuple(fn(k.body))) for k in self.kernels))

    def rewrite_main(self, fn) -> "Module":
        """The module with its first kernel's body replaced by `fn(kernel)`: the passes that rewrite the
        main kernel leave the kernels appended after it (a block sum, a zeroing of padding rows) alone."""
        kernel = self.kernels[0]
        return self.replace(kernels=(dataclasses.replace(kernel, body=tuple(fn(kernel))),) + self.kernels[1:])


def rewrite(body, fn) -> list:
    """The statement mutator the passes share: each statement replaced by `fn(st)` (a statement, or a list
    of statements in its place), the bodies of loops and nests rewritten first."""
    out = []
    for st in body:
        if isinstance(st, (Loop, Nest)):
            st = dataclasses.replace(st, body=tuple(rewrite(st.body, fn)))
        new = fn(st)
        out.extend(new if isinstance(new, list) else [new])
    return out


def rescope(body, scopes: Dict[str, str]) -> list:
    """The statements with every buffer named in `scopes` moved to that scope."""
    def fix(v):
        if isinstance(v, Buffer) and v.name in scopes:
            return dataclasses.replace(v, scope=scopes[v.name])
        return v
    return rewrite(body, lambda st: type(st)(**{f.name: fix(getattr(st, f.name)) for f in dataclasses.fields(st)}))


def rewrite_bodies(body, fn) -> list:
    """`fn(statements) -> statements` applied to the body of each loop, innermost first, then to `body`
    (a nest's body is one elementwise loop's statements, left to the pass that made it)."""
    body = [dataclasses.replace(st, body=tuple(rewrite_bodies(st.body, fn))) if isinstance(st, Loop) else st
            for st in body]
    return list(fn(body))


def statements(body):
    """Every statement, the bodies of loops and nests included, in order."""
    for st in body:
        yield st
        if isinstance(st, (Loop, Nest)):
            yield from statements(st.body)


def buffers(body) -> Dict[str, Buffer]:
    """Every buffer the statements name, by name."""
    out = {}
    for st in statements(body):
        for f in dataclasses.fields(st):
            v = getattr(st, f.name)
            if isinstance(v, Buffer):
                out.setdefault(v.name, v)
    return out


def exprs(st):
    """The expressions a statement holds (not those of a loop's body)."""
    if isinstance(st, Compute):
        return (st.value,) + tuple(e for _, e in st.at)
    if isinstance(st, Store):
        return st.indices + (st.value,) + ((st.guard,) if st.guard is not None else ())
    if isinstance(st, Loop):
        return (st.extent,) + tuple(e for _, e in st.binds)
    if isinstance(st, Copy):
        return tuple(e for e, _ in st.box)
    return ()


def map_exprs(body, fn):
    """The statements with `fn` applied to every expression they hold (loop bodies included)."""
    out = []
    for st in body:
        if isinstance(st, Compute):
            st = dataclasses.replace(st, value=fn(st.value), at=tuple((a, fn(e)) for a, e in st.at))
        elif isinstance(st, Store):
            st = dataclasses.replace(st, indices=tuple(fn(e) for e in st.indices), value=fn(st.value),
                                     guard=None if st.guard is None else fn(st.guard))
        elif isinstance(st, Loop):
            st = dataclasses.replace(st, extent=fn(st.extent), body=tuple(map_exprs(st.body, fn)),
                                     binds=tuple((n, fn(e)) for n, e in st.binds))
        elif isinstance(st, Nest):
            st = dataclasses.replace(st, body=tuple(map_exprs(st.body, fn)))
        elif isinstance(st, Copy):
            st = dataclasses.replace(st, box=tuple((fn(e), a) for e, a in st.box))
        out.append(st)
    return out


# -- def-use: which statements read and write which buffers (one definition, every pass and the verifier) ---
def _read_nodes(st):
    return [n for e in exprs(st) for n in ir.walk(e) if isinstance(n, ir.Read)]


def own_reads(st) -> Set[str]:
    """The buffers one statement reads itself (a loop's or nest's body not included): those its expressions
    read, a reduction's or scan's source, a matmul's operands, and its own destination where it writes only
    part of it (`Compute.at`: the rest is kept), and a copy's buffer where the copy stores it."""
    out = {n.buffer for n in _read_nodes(st)}
    if isinstance(st, Copy) and st.store:
        out.add(st.buf.name)
    if isinstance(st, (Reduce, Scan)):
        out.add(st.src.name)
    elif isinstance(st, Gemm):
        out |= {st.a.name, st.b.name}
    elif isinstance(st, Compute) and st.at:
        out.add(st.dst.name)
    return out


def own_writes(st) -> Set[str]:
    """The buffer one statement writes (a loop's or nest's body not included)."""
    if isinstance(st, (Compute, Fill, Reduce, Scan)):
        return {st.dst.name}
    if isinstance(st, Gemm):
        return {st.c.name}
    if isinstance(st, Copy) and not st.store:
        return {st.buf.name}
    return set()


def reads(st) -> Set[str]:
    """The buffers a statement reads, the body of a loop or nest included."""
    return set().union(*(own_reads(s) for s in statements([st])))


def writes(st) -> Set[str]:
    """The buffers a statement writes, the body of a loop or nest included."""
    return set().union(*(own_writes(s) for s in statements([st])))


@dataclass
class DefUse:
    """Per buffer, the statements that write it and the reads of it, each as (statement, the `ir.Read` node,
    or None where the statement reads the whole buffer itself: a reduction's source, a matmul's operand, a
    partial write's own destination)."""

    writers: Dict[str, List["Stmt"]]
    readers: Dict[str, List[Tuple["Stmt", Optional[ir.Read]]]]


def def_use(body) -> DefUse:
    """The writers and readers of every buffer in `body` (loop and nest bodies included), in order."""
    writers: Dict[str, list] = {}
    readers: Dict[str, list] = {}
    for st in statements(body):
        for name in own_writes(st):
            writers.setdefault(name, []).append(st)
        nodes = _read_nodes(st)
        for n in nodes:
            readers.setdefault(n.buffer, []).append((st, n))
        for name in own_reads(st) - {n.buffer for n in nodes}:
            readers.setdefault(name, []).append((st, None))
    return DefUse(writers, readers)
