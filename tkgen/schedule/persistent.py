"""The persistent-grid rewrite of a scheduled kernel (schedule field `persistent: true`).

A grid over row tiles adds each tile's share of a sum over the rows (an output that the kernel
accumulates into, such as a weight gradient) with an atomic add per tile: the order of the additions
changes from run to run, and so do the bits. Persistent, a fixed number of blocks (the knob `blocks`) each
loop over the tiles `bid, bid + blocks, ...`, keep their share of every such sum in a carried buffer, and
store it as one row of a scratch tensor `scratch_<output>` [blocks, numel]. A second kernel then adds the
rows in block order into the output: the same bits on every run, for a given `blocks`.

What does not depend on the row tile (a weight vector's load) is computed once, before the loop.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

from ..spec import expr as E
from ..ir import prim as ir, kernel as kir
from ..spec import pyexpr as P
from ..ir.prim import I32, op
from .passes import register

BLOCKS = "blocks"
SUM_THREADS = 128          # threads (one element each) of a block of the kernel adding the partials
UNROLL_BLOCKS = 1024       # its loop over the blocks is unrolled up to this many


def ceildiv(a, b):
    return op("floordiv", op("sub", op("add", a, b), ir.i32(1)), b)


def _row_dependent(e, dyn, in_loop) -> bool:
    for n in ir.walk(e):
        if isinstance(n, ir.Index) and n.axis == dyn:
            return True
        if isinstance(n, ir.Read) and n.buffer in in_loop:
            return True
    return False


def _row_sum(st, dyn) -> bool:
    """A store that adds into an output over axes without the rows: one share of a sum over the rows."""
    return isinstance(st, kir.Store) and st.accumulate and dyn not in st.axes and \
        not any(isinstance(n, ir.Index) and n.axis == dyn for i in st.indices for n in ir.walk(i))


def flat_index(indices, shape) -> ir.Expr:
    """The row-major position of `indices` in a tensor of storage `shape` (spec expressions)."""
    flat = None
    for i, extent in zip(indices, shape):
        flat = i if flat is None else op("add", op("mul", flat, ir.Size(P.py_expr(extent))), i)
    return flat if flat is not None else ir.i32(0)


def unflatten(flat, shape) -> Tuple[ir.Expr, ...]:
    out, rest = [], flat
    for extent in reversed(shape[1:]):
        n = ir.Size(P.py_expr(extent))
        out.append(op("floormod", rest, n))
        rest = op("floordiv", rest, n)
    return tuple([rest] + list(reversed(out)))


def numel_of(shape):
    total = None
    for extent in shape:
        total = extent if total is None else P.mul(total, extent)
    return total if total is not None else E.Num(1)


def go_persistent(module: kir.Module, kernel: kir.Kernel, dyn: str) -> kir.Module:
    """The module with `kernel` (a grid over the tiles of the row axis `dyn`) made persistent, plus one
    kernel adding the per-block partials of each sum over the rows."""
    split = kernel.split
    if split != (dyn,):
        raise ValueError(f"{module.op}: a persistent grid loops over row tiles, so only the rows may be split "
                         f"across blocks (split: {', '.join(split) or 'none'})")
    tensors = {t.name: t for t in module.tensors}
    bid = ir.Var("bid", I32)
    pre: List = []
    loop: List = []
    post: List = []
    sums = []                   # (output tensor, scratch tensor, carry buffer, store)
    in_loop = set()
    for st in kernel.body:
        if _row_sum(st, dyn):
            t = tensors[st.tensor]
            value = st.value.arg if isinstance(st.value, ir.Encode) else st.value
            carry = kir.Buffer(f"carry_{t.name}", st.axes, value.dtype)
            scratch = kir.TensorArg(f"scratch_{t.name}", "scratch", t.elem, (E.Name(BLOCKS), numel_of(t.shape)))
            zero = ir.Const(0.0 if value.dtype == ir.F32 else 0, value.dtype)
            pre.append(kir.Fill(carry, zero))
            share = value if st.guard is None else op("select", st.guard, value, zero)
            loop.append(kir.Compute(carry, op("add", ir.Read(carry.name, value.dtype), share)))
            post.append(kir.Store(scratch.name, (bid, flat_index(st.indices, t.shape)),
                                  ir.Encode(t.elem, ir.Read(carry.name, value.dtype)), st.axes, st.guard))
            sums.append((t, scratch, value.dtype))
            continue
        hoist = isinstance(st, kir.Compute) and not st.at and dyn not in st.dst.axes and \
            not _row_dependent(st.value, dyn, in_loop)
        if hoist:
            pre.append(st)
            continue
        loop.append(st)
        in_loop.update(kir.buffers([st]))
    if not sums:
        raise ValueError(f"{module.op}: `persistent: true` needs a sum over the rows (an accumulated output "
                         f"without the row axis) to keep per block")
    tiles = ceildiv(ir.extent(dyn), ir.block(dyn))
    tile = ir.Var("tile", I32)
    body = pre + [kir.Loop(tile.name, ceildiv(tiles, ir.Size(BLOCKS)), tuple(loop),
                           binds=((ir.tile_var(dyn), op("add", bid, op("mul", tile, ir.Size(BLOCKS)))),))] + post
    kernels = [dataclasses.replace(kernel, body=tuple(body), persistent=True)]
    axes = dict(module.axes)
    for t, scratch, dtype in sums:
        axis = f"blocksum_{t.name}"
        axes[axis] = kir.Axis(axis, numel_of(t.shape))
        kernels.append(_block_sum_kernel(t, scratch, axis, dtype))
    return module.replace(kernels=tuple(kernels), axes=axes, tensors=module.tensors + tuple(s for _, s, _ in sums))


def _block_sum_kernel(t: kir.TensorArg, scratch: kir.TensorArg, axis: str, dtype: str) -> kir.Kernel:
    """out[e] += the sum over blocks k, in order, of scratch[k, e]: one element per thread."""
    acc = kir.Buffer(f"carry_{t.name}", (axis,), dtype)
    here = ir.Index(axis)
    inside = op("lt", here, ir.extent(axis))
    part = ir.Var("part", I32)
    add = kir.Compute(acc, op("add", ir.Read(acc.name, acc.dtype),
                              ir.Decode(scratch.elem, ir.Fetch(scratch.name, (part, here), guard=inside), acc.dtype)))
    body = (kir.Fill(acc, ir.Const(0.0 if acc.dtype == ir.F32 else 0, acc.dtype)),
            # unrolled, so that the loads of many blocks' partials are in flight at once
            kir.Loop(part.name, ir.Size(BLOCKS), (add,), kind="unroll", limit=UNROLL_BLOCKS),
            kir.Store(t.name, unflatten(here, t.shape), ir.Encode(t.elem, ir.Read(acc.name, acc.dtype)), (axis,),
                      inside, accumulate=True))
    # a small block per thread group: the sum reads blocks * numel floats, so it wants many blocks
    block = P.call("min", E.Num(SUM_THREADS), E.Name("threads"))
    return kir.Kernel(f"blocksum_{t.name}", body, tiles=((axis, kir.Tile(block, True)),),
                      threads=ir.block(axis))


@register("go_persistent")
def persistent_pass(module: kir.Module, ctx, blocks: Optional[int] = None) -> kir.Module:
    """Where the schedule says `persistent: true`: a fixed number of blocks (`blocks`; default the
    schedule's `blocks`, else the profile's `persistent_blocks`) loop over the row tiles, and sums over the
    rows are added per block, then in block order."""
    if not ctx.sched.get("persistent"):
        return module
    module = go_persistent(module, module.kernels[0], module.dyn)
    n = blocks if blocks is not None else ctx.sched.get("blocks", ctx.arch.persistent_blocks)
    return module.replace(knobs=module.knobs + ((BLOCKS, n),))
