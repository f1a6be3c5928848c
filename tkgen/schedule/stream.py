"""A schedule rewrite: an axis that a block runs through in chunks (`stream: {axis: chunk}`), not whole.

The naive module holds every reduced axis whole, so a reduction over K holds tiles of K elements per row.
Streaming an axis puts every statement over it in one loop over its chunks (`for b_<axis> in
range(N / B)`, the chunk `B` a divisor of the extent, at most the knob `chunk_<axis>`): the loads and the
elementwise work of a chunk, then its part of each reduction and matmul over the axis, added into what the
earlier chunks left (the result starts at the reduction's neutral value before the loop). What reads those
results comes after the loop; what they need and does not vary over the axis comes before it. Inside the
loop the axis's global index is `b_<axis> * B + i_<axis>`, printed as that of an axis split across
blocks. The chunks run in ascending order, each in ascending order on the C target, so an ordered sum over
the axis (the C matmul's loop) adds its elements in the same order as without streaming.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Set, Tuple

from ..spec import expr as E
from ..ir import prim as ir, kernel as kir
from ..spec import pyexpr as P
from ..lower.lowering import neutral
from .passes import register

KNOB_CHUNK = "chunk_{}"


def stream_tiles(tiles, stream: Dict[str, int], multiple: int = 1) -> Tuple[list, list]:
    """(tiles with each streamed axis held a chunk at a time, the chunk knobs). `multiple`: what a chunk
    must be a multiple of (a tile matmul's K step)."""
    out, knobs = [], []
    for name, tile in tiles:
        if name in stream:
            knob = KNOB_CHUNK.format(name)
            knobs.append((knob, stream[name]))
            tile = kir.Tile(P.call("pick_block", E.Name(f"N_{name}"), E.Name(knob), E.Num(multiple)), streamed=True)
        out.append((name, tile))
    return out, knobs


def _involves(st, axis) -> bool:
    if isinstance(st, kir.Gemm):
        return st.k == axis
    if isinstance(st, kir.Reduce):
        return axis in st.src.axes
    if isinstance(st, (kir.Compute, kir.Fill, kir.Scan)):
        return axis in st.dst.axes
    if isinstance(st, kir.Store):
        return axis in st.axes
    return any(_involves(s, axis) for s in st.body)


def reads(st) -> Set[str]:
    """The buffers a statement (and the body of a loop or nest) reads."""
    out = set()
    for s in kir.statements([st]):
        out |= {n.buffer for e in kir.exprs(s) for n in ir.walk(e) if isinstance(n, ir.Read)}
        if isinstance(s, (kir.Reduce, kir.Scan)):
            out.add(s.src.name)
        elif isinstance(s, kir.Gemm):
            out |= {s.a.name, s.b.name}
        elif isinstance(s, kir.Compute) and s.at:
            out.add(s.dst.name)
    return out


def writes(st) -> Set[str]:
    out = set()
    for s in kir.statements([st]):
        for f in ("dst", "c"):
            b = getattr(s, f, None)
            if isinstance(b, kir.Buffer):
                out.add(b.name)
    return out


def _carried(st, axis):
    """A reduction or matmul over the streamed axis, accumulating chunk by chunk, and the Fill that
    starts its result; None for other statements."""
    if isinstance(st, kir.Reduce) and st.axis == axis:
        if st.accumulate:
            raise ValueError(f"a reduction over streamed axis {axis!r} that already accumulates")
        return dataclasses.replace(st, accumulate=True), kir.Fill(st.dst, neutral(st.kind, st.dst.dtype))
    if isinstance(st, kir.Gemm) and st.k == axis:
        if st.accumulate:
            raise ValueError(f"a matmul over streamed axis {axis!r} that already accumulates")
        return dataclasses.replace(st, accumulate=True), kir.Fill(st.c, ir.c(0.0))
    return None


def stream_body(body, axis, kind="serial", stages=0) -> List[kir.Stmt]:
    """The statements over `axis` in one loop over its chunks, with what they need before it and what
    reads their results after it (see the module docstring)."""
    inside, fills, carried, written = [], [], set(), set()
    for st in body:
        if not _involves(st, axis):
            continue
        if isinstance(st, (kir.Loop, kir.Nest)) and not all(
                _involves(s, axis) for s in kir.statements(st.body) if not isinstance(s, (kir.Loop, kir.Nest))):
            raise ValueError(f"axis {axis!r} cannot be streamed: the loop over its chunks would repeat a loop's "
                             "statements that do not vary over it (one streamed axis per kernel)")
        acc = _carried(st, axis)
        if acc is not None:
            st, fill = acc
            fills.append(fill)
            carried |= writes(st)
        inside.append(st)
        written |= writes(st)
    if not inside:
        return list(body)
    before, after, late = [], [], set()
    for st in body:              # after the loop: what reads its results, or what reads that, and so on
        if _involves(st, axis):
            continue
        if reads(st) & (written | late):
            after.append(st)
            late |= writes(st)
        else:
            before.append(st)
    for st in inside:
        if reads(st) & late:
            raise ValueError(f"axis {axis!r} cannot be streamed: a statement over it reads "
                             f"{', '.join(sorted(reads(st) & late))}, which needs a whole reduction over it first")
    for st in after:
        partial = reads(st) & (written - carried)
        if partial:
            raise ValueError(f"axis {axis!r} cannot be streamed: {', '.join(sorted(partial))} varies over it and is "
                             "read after its reductions")
    chunks = ir.op("floordiv", ir.Size(f"N_{axis}"), ir.Size(f"B_{axis}"))
    loop = kir.Loop(f"b_{axis}", chunks, tuple(inside), kind=kind, stages=stages)
    return before + fills + [loop] + after


@register("stream")
def stream_pass(module: kir.Module, ctx, kind: str = "serial", stages: int = 0) -> kir.Module:
    """For each axis of the schedule's `stream:`, the statements over it run in a loop over its chunks
    (`kind`: serial or pipelined, with `stages`), reductions and matmuls over it carried."""
    kernel = module.kernels[0]
    body = kernel.body
    for axis in ctx.sched.get("stream", {}):
        body = stream_body(body, axis, kind, stages)
    return module.replace(kernels=(dataclasses.replace(kernel, body=tuple(body)),) + module.kernels[1:])
