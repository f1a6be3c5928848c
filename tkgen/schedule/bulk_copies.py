"""Pass `bulk_copies`: an elementwise load of a rectangular box of a tensor staged by one bulk copy.

Before it, every global read is an element fetched inside a parallel loop: `tile[i] = guard ? value(x[f(i)])
: 0`, each thread loading its elements. This pass turns such a load into a `kir.Copy` of the box into a
shared tile of the stored elements (`T.copy`: on CUDA TileLang moves it with TMA, cp.async or vector loads,
as it can), followed by the same elementwise loop reading the staged element instead of the tensor:
`tile[i] = guard ? value(staged[i]) : 0`.

The values are the same, element for element: where the guard holds, the original loop read the tensor's
element at `f(i)`, which lies inside the tensor (the load was valid there), and the copy put that very
element at `staged[i]` (the box is `f` over the tile: each storage index is its start plus one lane index
with coefficient 1, or an index of a looped axis); where the guard is false, both give 0, whatever the
copy staged there. So padded lanes (a whole axis padded to a power of two) and the rows past the tensor's
end stay zero, and what the copy stages past the end (zeros: TileLang predicates each dim of the region
against the tensor's shape, TMA fills zeros) or in padding inside the tensor (the next group's rows) is
never used. The conversion (`value`, the decoder of the stored format) stays in the loop, so a load whose
storage differs from the tile's dtype (bf16 into float32) is staged as stored.

What is staged: a Compute that is a whole tile's load (its value the decoded, possibly guarded, fetch of
one tensor, in a parallel loop of its own: `fuse` gives loads theirs), whose indices are linear in the
tile's lane indices: per storage dim a start plus at most one lane index with coefficient 1 (the dims'
such axes in the tile's order, its innermost), other lanes, outer axes of the tile, with any coefficient
(a mixed-radix view: `(b * B_b + i_b) * N_r + i_r`, whose looped axis `b` copies once per index). No
gather (an index that reads a buffer), no broadcast (every tile axis in some index), no transposition.
No op is named: the rule is the shape of the load. It runs after `index_tiles` (the indices are then the
tile's own) and before `check_tile_bytes` (which counts the staging tiles).

`instruction` asks TileLang for the instruction that moves the box on CUDA (`prefer_instruction`: `tma`,
`cp_async`, `sync`); left empty TileLang 0.1.15 chooses, and for a load into shared memory it chooses
16-byte vector loads and stores by every thread (TMA only for stores, or where asked).

The parameter `max_copies` is the number of loads per kernel staged, in program order (0, the default,
turns the pass off): staging costs shared memory (the tile's elements as stored), and whether it is
faster is measured per op (benchmarks/bulk_copies_gpu.py) and set by an op's `schedule: {pass_params:
{bulk_copies: {max_copies: N}}}` or by `tkgen tune --space '{"bulk_copies.max_copies": [0, 1, 2]}'`.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from ..ir import kernel as kir
from ..ir import prim as ir
from .passes import register


def _linear(e, lanes) -> Optional[Tuple[ir.Expr, Dict[str, ir.Expr]]]:
    """`e` as (rest, {axis: coefficient}): e = rest + sum(coefficient * i_axis) over local lane indices of
    `lanes`, with `rest` and every coefficient free of them; None where `e` is not of that form."""
    def free(x):
        return not any(isinstance(n, ir.Index) and n.axis in lanes for n in ir.walk(x))
    if free(e):
        return e, {}
    if isinstance(e, ir.Index) and e.local:
        return ir.Const(0, e.dtype), {e.axis: ir.Const(1, e.dtype)}
    if isinstance(e, ir.Op) and e.op == "add":
        a, b = (_linear(x, lanes) for x in e.args)
        if a is None or b is None:
            return None
        coef = dict(a[1])
        for axis, c in b[1].items():
            coef[axis] = ir.op("add", coef[axis], c) if axis in coef else c
        return ir.op("add", a[0], b[0]), coef
    if isinstance(e, ir.Op) and e.op == "mul":
        x, k = e.args if free(e.args[1]) else (e.args[1], e.args[0])
        lin = _linear(x, lanes) if free(k) else None
        if lin is None:
            return None
        return ir.op("mul", lin[0], k), {axis: ir.op("mul", c, k) for axis, c in lin[1].items()}
    return None


def _is_one(c) -> bool:
    c = ir.fold(c)
    return isinstance(c, ir.Const) and c.value == 1 and c.dtype in ir.INTS


def copy_box(fetch: ir.Fetch, axes) -> Optional[Tuple[Tuple[ir.Expr, Optional[str]], ...]]:
    """The box of a bulk copy that stages, for every index of a tile over `axes` (lane indices), the
    element `fetch` reads there: per storage dim (start, axis), or None where the reads are not one box
    (see the module docstring)."""
    lanes = set(axes)
    box, seen = [], set()
    for idx in fetch.indices:
        if any(isinstance(n, (ir.Read, ir.Fetch)) for n in ir.walk(idx)):
            return None                                     # a gather
        lin = _linear(idx, lanes)
        if lin is None:
            return None
        units = [a for a, c in lin[1].items() if _is_one(c)]
        if len(units) > 1:
            return None
        inner = units[0] if units else None
        seen |= set(lin[1])
        if inner is not None:
            zero = ir.Const(0, ir.I32)
            idx = ir.fold(ir.rebuild(idx, lambda n: zero if isinstance(n, ir.Index) and n.axis == inner else None))
        box.append((idx, inner))
    named = [a for _, a in box if a is not None]
    if seen != lanes or not named or named != [a for a in axes if a in named]:
        return None                                         # a broadcast, no box, or a transposition
    if list(axes[len(axes) - len(named):]) != named:
        return None                                         # a looped axis inside the box (a strided read)
    return tuple(box)


def _staged_load(st, tensors) -> Optional[Tuple[ir.Fetch, str]]:
    """(the fetch, its element type) of a Compute that is a whole tile's decoded load of one tensor."""
    if not isinstance(st, kir.Compute) or st.at or st.dst.scope == "var" or not st.dst.axes:
        return None
    v = st.value
    if not (isinstance(v, ir.Decode) and isinstance(v.arg, ir.Fetch) and v.arg.dtype == ir.RAW):
        return None
    t = tensors.get(v.arg.tensor)
    if t is None or t.flat or t.elem != v.elem:
        return None
    return v.arg, v.elem


def stage_loads(body, tensors, budget: List[int], taken, instruction: str = "") -> list:
    """`body` with its loads staged by bulk copies (at most budget[0] of them, counted down)."""
    def stage(st):
        if not (isinstance(st, kir.Nest) and len(st.body) == 1 and budget[0] > 0):
            return st
        c = st.body[0]
        found = _staged_load(c, tensors)
        if found is None or tuple(st.axes) != tuple(c.dst.axes):
            return st
        fetch, elem = found
        box = copy_box(fetch, c.dst.axes)
        if box is None:
            return st
        name = f"{c.dst.name}_bulk"
        if name in taken:
            return st
        taken.add(name)
        budget[0] -= 1
        buf = kir.Buffer(name, c.dst.axes, ir.RAW, "shared", elem=tensors[fetch.tensor].elem)
        value = ir.Decode(elem, ir.Read(name, ir.RAW), c.value.dtype)
        if fetch.guard is not None:
            value = ir.op("select", fetch.guard, value, ir.c(0, c.value.dtype))
        load = dataclasses.replace(c, value=value)
        return [kir.Copy(fetch.tensor, box, buf, instruction=instruction), dataclasses.replace(st, body=(load,))]
    return kir.rewrite(body, stage)


@register("bulk_copies")
def bulk_copies_pass(module: kir.Module, ctx, max_copies: int = 0, instruction: str = "") -> kir.Module:
    """Up to `max_copies` loads of a box of a tensor per kernel staged by one bulk copy into shared
    memory (`T.copy`), the elementwise loop then reading the staged elements (0: off); `instruction`: the
    one TileLang is asked to use on CUDA (tma, cp_async, sync; empty: its choice)."""
    if instruction not in kir.COPY_INSTRUCTIONS:
        raise ValueError(f"bulk_copies: instruction {instruction!r} is not one of {kir.COPY_INSTRUCTIONS}")
    if max_copies <= 0:
        return module
    tensors = {t.name: t for t in module.tensors}

    def per_kernel(body):
        taken = set(kir.buffers(body))
        return stage_loads(body, tensors, [max_copies], taken, instruction)
    return module.rewrite_kernels(per_kernel)
