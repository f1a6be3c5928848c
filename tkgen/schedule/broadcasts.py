"""Pass `share_broadcasts`: a small tile that loops of several wider shapes read, held in shared memory.

A tile over fewer axes than the elementwise loop that reads it (a per-row flag read in loops over the rows
and the experts, the rows and the slots, ...) is broadcast: on CUDA each fragment element must sit in every
thread of that loop which reads it. TileLang's layout inference then looks for a fragment layout that every
reading loop can use, and with three such loops of different shapes that search took 34 of the 41 seconds
of lowering the MoE top-k gate's kernel with a row mask on this machine (7.5 s once the flag was shared).
Shared memory needs no layout: each reading thread loads the element. The rule is data: the pass's
`min_shapes` (the number of distinct wider loop shapes that makes a tile shared; 0 turns the pass off).
Only tiles written elementwise are moved; a reduction's result or source stays a fragment.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Set, Tuple

from ..ir import kernel as kir
from .passes import register


def _loop_shape(st, nest: Optional[kir.Nest]) -> Optional[Tuple[str, ...]]:
    """The axes of the elementwise loop a statement runs in, or None for one that is not elementwise."""
    if nest is not None:
        return nest.axes
    if isinstance(st, (kir.Compute, kir.Store)):
        return st.axes
    return None


def broadcast_shapes(body) -> Dict[str, Set[Tuple[str, ...]]]:
    """Per buffer, the shapes of the elementwise loops that read it over more axes than it has; a buffer
    read by a statement that is not elementwise (a reduction's source, a matmul operand) maps to None."""
    out: Dict[str, Optional[Set[Tuple[str, ...]]]] = {}

    def visit(stmts, nest):
        for st in stmts:
            if isinstance(st, kir.Nest):
                visit(st.body, st)
                continue
            if isinstance(st, kir.Loop):
                visit(st.body, None)
                continue
            shape = _loop_shape(st, nest)
            for name in kir.own_reads(st):
                if shape is None:
                    out[name] = None
                elif out.get(name, set()) is not None:
                    out.setdefault(name, set()).add(shape)
    visit(body, None)
    return out


def share_broadcasts(kernel: kir.Kernel, min_shapes: int) -> kir.Kernel:
    if min_shapes <= 0:
        return kernel
    uses, bufs = kir.def_use(kernel.body), kir.buffers(kernel.body)
    shared = {}
    for name, shapes in broadcast_shapes(kernel.body).items():
        buf = bufs.get(name)
        if buf is None or buf.scope != "tile" or shapes is None:
            continue
        if not all(isinstance(w, kir.Compute) for w in uses.writers.get(name, [None])):
            continue
        wider = {s for s in shapes if set(buf.axes) < set(s)}
        if len(wider) >= min_shapes:
            shared[name] = "shared"
    if not shared:
        return kernel
    return dataclasses.replace(kernel, body=tuple(kir.rescope(kernel.body, shared)))


@register("share_broadcasts")
def share_broadcasts_pass(module: kir.Module, ctx, min_shapes: int = 3) -> kir.Module:
    """Tiles read by elementwise loops of at least `min_shapes` distinct wider shapes held in shared memory
    (where the profile's tiles are fragments)."""
    if ctx.arch.tile_memory != "fragment":
        return module
    return module.replace(kernels=tuple(share_broadcasts(k, min_shapes) for k in module.kernels))
