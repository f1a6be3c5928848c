"""Pass `scan_rows`: prefixes along the rows (`prefix(v, t)` over the dynamic axis) for any number of rows.

The lowering writes such a prefix as a sum carried along the whole row axis: a `Fill` of the carry, then a
loop over the rows that stores the carry at each row and adds the row's value (tkgen/lower/stages/
reductions.py: Prefix). That is the reference. A kernel holds the rows in tiles across blocks, so it splits
the work in two launches, both over a fixed number of blocks (the knob `blocks`, as a persistent grid), block
`bid` looping over the contiguous run of row tiles `bid * per, ..., bid * per + per - 1`:

1. `scan_partials`: each block adds up the values of its rows (only what those sums need is computed; no
   output is written) and stores the carries as row `bid` of a scratch tensor `scratch_<carry>`
   [blocks, numel];
2. the op's kernel: each block starts its carries at the sum of the rows of scratch before its own (the
   rows of the blocks before it, in block order), then runs the op's statements tile after tile, its loop
   over each tile's rows carrying on from the tile before.

Rows past the tensor add nothing. Prefixes along the rows sum integers (the builder refuses floats), which
wrap the same in any order: the kernel's results equal the reference's for any blocks and tile sizes.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Set

from ..spec import expr as E
from ..ir import prim as ir, kernel as kir
from ..ir.prim import I32, I64, op
from .passes import register
from .persistent import BLOCKS, ceildiv, flat_index, numel_of

_STORAGE = {I32: "int32", I64: "int64"}


def _live(body, keep: Set[str]) -> List:
    """`body` without the statements whose results nothing reads: what a store, a later statement or a
    buffer of `keep` needs (repeated until nothing more goes; a loop is kept or dropped whole)."""
    body = list(body)
    while True:
        reads = [kir.reads(s) for s in body]
        out = []
        for i, s in enumerate(body):
            others = set().union(*(r for j, r in enumerate(reads) if j != i)) | keep
            if isinstance(s, kir.Store) or kir.writes(s) & others:
                out.append(s)
        if len(out) == len(body):
            return out
        body = out


def scan_rows(module: kir.Module, kernel: kir.Kernel, blocks) -> kir.Module:
    dyn, carries = module.dyn, set(module.row_carries)
    if kernel.split != (dyn,):
        raise ValueError(f"{module.op}: a prefix along the rows runs over row tiles in a fixed number of blocks, so "
                         f"only the rows may be split across blocks (split: {', '.join(kernel.split) or 'none'})")
    tile_index = ir.Var(ir.tile_var(dyn), I32)
    bid, tile, part = ir.Var("bid", I32), ir.Var("tile", I32), ir.Var("part", I32)
    fills = [st for st in kernel.body if isinstance(st, kir.Fill) and st.dst.name in carries]

    def over_tile(loop: kir.Loop) -> kir.Loop:
        """A scan's loop over the rows of one tile, rows past the tensor adding nothing."""
        step = ir.Var(loop.var, I32)
        inside = op("lt", op("add", op("mul", tile_index, ir.block(dyn)), step), ir.extent(dyn))

        def guarded(st):
            if not (isinstance(st, kir.Compute) and st.dst.name in carries):
                return st
            carry = ir.Read(st.dst.name, st.dst.dtype)
            if not (isinstance(st.value, ir.Op) and st.value.op == "add" and st.value.args[0] == carry):
                raise ValueError(f"{module.op}: the carry {st.dst.name!r} of a prefix along the rows is not a sum")
            zero = ir.Const(0, st.dst.dtype)
            return dataclasses.replace(st, value=op("add", carry, op("select", inside, st.value.args[1], zero)))
        return dataclasses.replace(loop, extent=ir.block(dyn), body=tuple(guarded(s) for s in loop.body))

    body = []
    for st in kernel.body:
        if isinstance(st, kir.Fill) and st.dst.name in carries:
            continue
        body.append(over_tile(st) if isinstance(st, kir.Loop) and kir.writes(st) & carries else st)

    # the partial sums: each scan loop keeps only its carries' additions, and nothing is stored, at any depth
    # (a store inside a loop, such as a top-k's round by round, would be written twice, or added twice)
    partial = []
    for st in kir.rewrite(body, lambda st: [] if isinstance(st, kir.Store) else st):
        if isinstance(st, kir.Loop) and kir.writes(st) & carries:
            st = dataclasses.replace(st, body=tuple(s for s in st.body if kir.own_writes(s) & carries))
        partial.append(st)
    partial = _live(partial, carries)

    per = ceildiv(ceildiv(ir.extent(dyn), ir.block(dyn)), ir.Size(BLOCKS))
    binds = ((tile_index.name, op("add", op("mul", bid, per), tile)),)
    scratch, stores, starts = [], [], []
    for fill in fills:
        carry = fill.dst
        rest = carry.axes
        shape = [module.axes[a].extent for a in rest]
        t = kir.TensorArg(f"scratch_{carry.name}", "scratch", _STORAGE[carry.dtype], (E.Name(BLOCKS), numel_of(shape)))
        scratch.append(t)
        at = (bid, flat_index([ir.Index(a) for a in rest], shape))
        inside = ir.conj(*(op("lt", ir.Index(a), ir.extent(a)) for a in rest))
        stores.append(kir.Store(t.name, at, ir.Encode(t.elem, ir.Read(carry.name, carry.dtype)), rest, inside))
        earlier = ir.Decode(t.elem, ir.Fetch(t.name, (part,) + at[1:], guard=inside), carry.dtype)
        add = kir.Compute(carry, op("add", ir.Read(carry.name, carry.dtype), earlier))
        starts += [fill, kir.Loop(part.name, bid, (add,))]
    first = kir.Kernel(f"scan_partials_{kernel.name}", tuple(fills) + (kir.Loop(tile.name, per, tuple(partial), binds=binds),)
                       + tuple(stores), tiles=kernel.tiles, persistent=True, threads=kernel.threads)
    second = dataclasses.replace(kernel, body=tuple(starts) + (kir.Loop(tile.name, per, tuple(body), binds=binds),),
                                 persistent=True)
    knobs = module.knobs if any(n == BLOCKS for n, _ in module.knobs) else module.knobs + ((BLOCKS, blocks),)
    kernels = tuple(k for k in module.kernels if k is not kernel)
    return module.replace(kernels=(first, second) + kernels, tensors=module.tensors + tuple(scratch), knobs=knobs)


@register("scan_rows")
def scan_rows_pass(module: kir.Module, ctx, blocks: Optional[int] = None) -> kir.Module:
    """Prefixes along the rows in two launches over `blocks` blocks (default the schedule's `blocks`, else the
    profile's `persistent_blocks`): each block's sums of its rows, then the op with each block's carries
    starting from the sums of the blocks before it."""
    if not module.row_carries:
        return module
    if ctx.sched.get("persistent"):
        raise ValueError(f"{module.op}: `persistent: true` and a prefix along the rows do not combine")
    main = [k for k in module.kernels if any(isinstance(s, kir.Fill) and s.dst.name in module.row_carries
                                             for s in k.body)]
    if len(main) != 1:
        raise ValueError(f"{module.op}: the prefixes along the rows must be in one kernel")
    n = blocks if blocks is not None else ctx.sched.get("blocks", ctx.arch.persistent_blocks)
    return scan_rows(module, main[0], n)
