"""Pass `pipeline_copies`: a serial loop whose iterations start with bulk copies into shared memory made a
software-pipelined loop (`kir.Loop` kind `pipelined`, printed `T.Pipelined(extent, num_stages=N)` on CUDA).

A loop over tiles (the persistent loop over row tiles, a block's loop over row groups) whose body stages its
loads with `kir.Copy` (the pass `bulk_copies`) waits for each tile's copies before it computes on them: the
copies only overlap the compute where the next tile's copies are issued while this tile is computed.
TileLang's `T.Pipelined` does that: it gives each shared buffer a copy writes `num_stages` versions, issues the
copies of iterations `i + 1 .. i + stages - 1` before iteration `i`'s compute (asynchronously: cp.async
groups committed and waited for, or TMA with mbarriers) and runs the compute in order.

The values are the same where the loop's result does not depend on when a copy runs. The pass makes sure of
it, per loop, and leaves a loop that fails any rule serial:

- every copy it moves is a load (not a store back) at the loop body's top level, into a shared buffer that
  no other statement of the kernel writes, and that no statement of the body before the copy reads (the
  buffer is not carried from one iteration to the next: each iteration reads only what its own copy put
  there, which is what the multi-buffered version holds);
- its box starts read no buffer (only the loop's index, its bindings, block indices and sizes: what they
  are in a later iteration is known ahead of it);
- no statement of the kernel stores into a tensor the loop copies from (a later iteration's copy, issued
  early, reads what the serial loop would have read then).

Under these rules the copies are first moved to the top of the body, in their order (nothing before a copy
touches its buffer or its tensor, so moving it up changes no value), which is the form TileLang's pipeline
planning wants (the producers first), and the loop is marked pipelined with `stages`. Rows past the tensor's
end in the last iterations are staged as zeros by the copy and masked where they are read, as without the
pass.

`stages` (0, the default, turns the pass off; 1 is no overlap, so it is off too): how many tiles' copies are
in flight; each multiplies the staged buffers' shared memory (tkgen/schedule/tile_bytes.py counts it). On the
C target TileLang has no pipeline: the printer prints such a loop as a serial loop, the statements in the
order the pass left them (the same values, which the CPU tests check). Whether pipelining is faster is
measured per op (benchmarks/bulk_copies_gpu.py) and set by `schedule: {pass_params: {pipeline_copies:
{stages: N}}}` or by `tkgen tune --space '{"pipeline_copies.stages": [0, 2, 3]}'`.

It is a pass of its own, not a parameter of `bulk_copies`: it decides about loops, not loads (a copy made by
any pass, or written by hand in a test, qualifies), its rules are about the whole loop and kernel, and the
two parameters are tuned independently (stages without copies does nothing).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Set

from ..ir import kernel as kir
from ..ir import prim as ir
from .passes import register

# TileLang 0.1.15 ends a pipelined loop whose trip count is only known at run time (a loop over the row tiles)
# with an epilogue `T.unroll(stages)` whose cp.async wait counts are `stages - 1 - i`: its CUDA printer needs
# them constant, which they are only once the epilogue is unrolled in the IR (not by a pragma)
EXPLICIT_UNROLL = (("tl.UnrollLoop", {"explicit_unroll": True}),)


def _hoisted(loop: kir.Loop, stored: Set[str], writers) -> Optional[tuple]:
    """The body of `loop` with its copies moved to its top, or None where the loop may not be pipelined
    (see the module docstring)."""
    if loop.kind != "serial" or loop.limit:
        return None
    copies, rest, seen_reads = [], [], set()
    for st in loop.body:
        if isinstance(st, kir.Copy) and not st.store:
            buf = st.buf.name
            ok = (st.buf.scope == "shared" and st.tensor not in stored and buf not in seen_reads
                  and writers.get(buf, []) == [st]
                  and not any(isinstance(n, (ir.Read, ir.Fetch)) for e, _ in st.box for n in ir.walk(e)))
            if not ok:
                return None
            copies.append(st)
            continue
        if isinstance(st, kir.Copy) and st.tensor in {c.tensor for c in copies}:
            return None                  # a store into a tensor the loop copies from (also caught by `stored`)
        seen_reads |= kir.reads(st)
        rest.append(st)
    if not copies:
        return None
    return tuple(copies + rest)


def pipeline_body(body, stages: int) -> list:
    """`body` (a kernel's statements) with each loop that qualifies pipelined with `stages` stages."""
    stored = {st.tensor for st in kir.statements(body) if isinstance(st, kir.Store)} | \
        {st.tensor for st in kir.statements(body) if isinstance(st, kir.Copy) and st.store}
    writers = kir.def_use(body).writers

    def mark(st):
        if not isinstance(st, kir.Loop):
            return st
        new = _hoisted(st, stored, writers)
        if new is None:
            return st
        return dataclasses.replace(st, body=new, kind="pipelined", stages=stages)
    return kir.rewrite(body, mark)


@register("pipeline_copies")
def pipeline_copies_pass(module: kir.Module, ctx, stages: int = 0) -> kir.Module:
    """Each serial loop whose iterations stage loads by bulk copies into shared memory (that no iteration
    carries to the next) software-pipelined with `stages` stages: the copies moved to the loop's top, the
    loop printed `T.Pipelined` on CUDA (0 or 1: off)."""
    if stages < 0:
        raise ValueError(f"pipeline_copies: stages must be at least 0, not {stages}")
    if stages <= 1:
        return module
    out = module.rewrite_kernels(lambda body: pipeline_body(body, stages))
    if out.kernels != module.kernels and ctx.arch.backend == "cuda":
        out = out.replace(pass_configs=tuple({**dict(out.pass_configs), **dict(EXPLICIT_UNROLL)}.items()))
    return out
