"""A schedule rewrite: an ordered fold reads the elements it adds from the tensors, not from a staged tile.

A fold (`fold(sum, v, a, start)`) runs a serial loop over axis `a` and reads `v` at the loop's index, so the
lowering computes all of `v`'s tile first and copies it where every thread can read it (shared memory on
CUDA): for a product `comb * residual` over (t, i, o, d) folded over i, a tile of M * M * block_d floats
and a shared round trip per element. When the value folded is a pure function of its indices (loads of tensors and
arithmetic on them, no reduction or other carried state between), each step can compute its element
where it is added instead: `acc = acc + comb[t, r_i, o] * residual[t, r_i, d]`, the loads at the loop's
index. The float32 operations are the same, in the same order, so the bits are too; the staged copy and
the tiles only it read are dropped. A value that also reads state over fewer axes (a gate's per-slot
factor [t, j] in `where(ids == e, per_slot, 0)` over (t, e, j)) reads that state from a shared copy of
it at the loop's index: the small copy replaces the staged [t, e, j] tile.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional

from ..ir import prim as ir, kernel as kir
from .passes import register


def _defs(body) -> Dict[str, kir.Compute]:
    """Buffers written exactly once, by a top-level Compute of the whole buffer."""
    count: Dict[str, int] = {}
    for st in kir.statements(body):
        for f in dataclasses.fields(st):
            v = getattr(st, f.name)
            if f.name in ("dst",) and isinstance(v, kir.Buffer):
                count[v.name] = count.get(v.name, 0) + 1
    return {st.dst.name: st for st in body
            if isinstance(st, kir.Compute) and not st.at and count.get(st.dst.name) == 1}


def _pure(name, defs, used: set, seen=(), fixed=frozenset(), smaller=None) -> Optional[ir.Expr]:
    """The value of buffer `name` as an expression of indices, tensors, constants and shared copies alone
    (its reads of other buffers expanded; their names added to `used`), or None where it reads state (a
    reduction, a loop's carry, a slice).

    A shared buffer written once by a whole-buffer copy stays a read (at explicit indices, themselves
    expanded): it holds the same values wherever the expression is computed after it, and every thread
    can read any element of it. So a fold over pairs, `fold(sum, where(gather(ids, j, r) == ids, ...), j)`,
    reads the gathered element from the [r] copy at each step instead of a staged [r, j] tile.

    `fixed`: the axes the expression is read at other indices of (the fold's axis). A tile that does not
    vary over them, written once, stays a read at the statement's own indices (the pair's own expert),
    rather than its loads repeated at every step.

    `smaller` (a dict, with the axes of the staged tile under the key None): a buffer of state defined by
    one Compute over fewer of those axes is read from a copy that every thread can read (added to
    `smaller`): `hit = where(ids == e, per_slot, 0)` over (t, e, j) reads per_slot's [t, j] copy, not a
    staged [t, e, j] tile."""
    st = defs.get(name)
    if st is None or name in seen:
        return None
    used.add(name)
    failed = []

    def expand(e):
        return None if e is None else ir.rebuild(e, fn)

    def fn(n):
        if isinstance(n, ir.Read):
            st_n = defs.get(n.buffer)
            plain = n.indices is None and n.guard is None
            if plain and fixed and st_n is not None and st_n.dst.scope == "tile" and not set(st_n.dst.axes) & fixed:
                inner = n
            elif plain:
                trial = None if smaller is None else dict(smaller)     # copies of a failed expansion are not kept
                inner = _pure(n.buffer, defs, used, seen + (name,), fixed, trial)
                if inner is not None and smaller is not None:
                    smaller.update(trial)
                if inner is None and smaller is not None and st_n is not None and \
                        set(st_n.dst.axes) < set(smaller[None]):
                    axes = st_n.dst.axes
                    copy = smaller.setdefault(n.buffer, kir.Buffer(f"{n.buffer}_shared", axes, n.dtype, "shared"))
                    inner = ir.Read(copy.name, n.dtype, tuple(ir.Index(a, local=True) for a in axes))
            elif st_n is not None and st_n.dst.scope == "shared":
                buf = st_n.dst
                indices = n.indices or tuple(ir.Index(a, local=True) for a in buf.axes)
                inner = dataclasses.replace(n, indices=tuple(map(expand, indices)), guard=expand(n.guard))
            else:
                inner = None
            if inner is None:
                failed.append(n)
                return n
            return inner
        return None
    e = ir.rebuild(st.value, fn)
    return None if failed else e


def _at(e: ir.Expr, index: Dict[str, ir.Expr]) -> ir.Expr:
    return ir.rebuild(e, lambda n: index.get(n.axis) if isinstance(n, ir.Index) else None)


def read_fold_sources(body, kernel: kir.Kernel):
    """Reads of a staged fold source at a loop index become the source's expression at that index."""
    defs = _defs(body)
    staged, used, copies = {}, set(), {}
    for name, st in defs.items():
        v = st.value
        if st.dst.scope == "shared" and isinstance(v, ir.Read) and v.indices is None and v.guard is None:
            src = defs.get(v.buffer)
            chain, smaller = set(), {None: st.dst.axes}
            pure = _pure(v.buffer, defs, chain, smaller=smaller) if src is not None and src.dst.axes == st.dst.axes \
                else None
            if pure is not None:
                staged[name] = (st.dst, v.buffer)
                used |= chain | {name}
                copies.update({k: b for k, b in smaller.items() if k is not None})
    if not staged:
        return list(body)
    with_copies = []
    for st in body:                       # each copy right after the Compute of what it copies
        with_copies.append(st)
        if isinstance(st, kir.Compute) and not st.at and st.dst.name in copies:
            with_copies.append(kir.Compute(copies[st.dst.name], ir.Read(st.dst.name, st.dst.dtype)))
    body = with_copies

    def inline(n):
        if not (isinstance(n, ir.Read) and n.buffer in staged and n.indices is not None and n.guard is None):
            return None
        buf, src = staged[n.buffer]
        index = {}
        for axis, i in zip(buf.axes, n.indices):
            if isinstance(i, ir.Index) and i.axis == axis:
                continue
            if kernel.tile(axis).split:        # a loop index stands for a global one only on a whole axis
                return None
            index[axis] = i
        known = {None: buf.axes, **copies}
        trial = dict(known)
        pure = _pure(src, defs, set(), fixed=frozenset(index), smaller=trial)
        if pure is None or set(trial) != set(known):      # a copy the body does not make
            return None
        return _at(pure, index)
    dead = used | {b.name for b in copies.values()}       # a copy that no inlined source reads goes too
    return drop_unread(kir.map_exprs(body, lambda e: ir.rebuild(e, inline)), dead)


UNROLL_FETCHES = 256      # a fold that reads its elements from tensors is unrolled up to this many steps


def unroll_fetching_loops(body):
    """Serial loops whose steps read tensors at the loop's index (a fold after `read_fold_sources`),
    unrolled while short: on a GPU the loads of many steps are then in flight at once, instead of one
    load per step waited for (the adds stay in order, so the bits do not change). Only loops of a size
    the factory knows: one over a run-time count (the blocks before this one) stays serial."""
    def unrolled(st):
        if isinstance(st, kir.Loop) and st.kind == "serial" and _fetches_at(st.body, st.var) and \
                not any(isinstance(n, ir.Var) for n in ir.walk(st.extent)):
            return dataclasses.replace(st, kind="unroll", limit=UNROLL_FETCHES)
        return st
    return kir.rewrite(body, unrolled)


def _fetches_at(body, var) -> bool:
    return any(isinstance(n, ir.Fetch) and any(var in ir.var_names(i) for i in n.indices)
               for st in kir.statements(body) for e in kir.exprs(st) for n in ir.walk(e))


def drop_unread(body, candidates: set):
    """The top-level Computes of `candidates` that nothing reads any more, until none is left."""
    body = list(body)
    while True:
        read = set().union(*map(kir.reads, body))
        kept = [st for st in body if not (isinstance(st, kir.Compute) and not st.at and st.dst.name in candidates
                                          and st.dst.name not in read)]
        if len(kept) == len(body):
            return kept
        body = kept


@register("read_fold_sources")
def read_fold_sources_pass(module: kir.Module, ctx) -> kir.Module:
    """An ordered fold of a value that is a function of loads computes each element where it is added,
    instead of reading a staged copy of the whole tile."""
    return module.rewrite_main(lambda kernel: read_fold_sources(kernel.body, kernel))


@register("unroll_fetching_loops")
def unroll_pass(module: kir.Module, ctx) -> kir.Module:
    """A fold that reads tensors at its step is unrolled (CUDA: the loads of several steps in flight)."""
    return module.rewrite_kernels(unroll_fetching_loops)
