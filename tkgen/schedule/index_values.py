"""Pass `recompute_index_values`: a tile whose value is arithmetic on axis indices, computed where it is read.

A tile such as a gather's index (`member = iota(g) * per_group + iota(c)`, `group_of = iota(e) // per_group`),
a slot number or a row's hash reads no buffer: its value is a small expression of axis indices, sizes and
params. Held in a fragment and read by wider loops, it is a broadcast, and on CUDA TileLang's layout
inference then plans every reading loop with the index hidden behind a fragment load: its vectorizer asks
its SMT prover, for each vector width in turn, whether the loaded index is the same across a vector, which it
cannot prove, and it asks again for each root the free layout search tries. Lowering the grouped top-2 MoE gate with
every optional input spent 22.8 s there (CPU time); 17.5 s once its four such tiles were recomputed in
their readers (indices the simplifier proves at once). Recomputing costs the reader a few integer operations and
saves the tile's registers. The rule is data: the pass's `max_ops` (the largest value recomputed, in
operations; 0 turns the pass off). Only a tile whose every read is at the reader's own indices, in a loop
over all of its axes, is recomputed.
"""
from __future__ import annotations

import dataclasses
from typing import Dict

from ..ir import kernel as kir
from ..ir import prim as ir
from .passes import register

_LEAVES = (ir.Const, ir.Index, ir.Size, ir.Scalar)


def _index_value_ops(e) -> int:
    """The operations of an expression made of axis indices, sizes, params and constants only, or -1."""
    ops = 0
    for n in ir.walk(e):
        if isinstance(n, ir.Op):
            ops += 1
        elif not isinstance(n, _LEAVES):
            return -1
    return ops


def _loop_axes(st, nest) -> tuple:
    if nest is not None:
        return nest.axes
    if isinstance(st, kir.Store):
        return tuple(st.axes)
    if isinstance(st, kir.Compute):
        return st.axes
    return ()


def recompute_index_values(kernel: kir.Kernel, max_ops: int, keep=None) -> kir.Kernel:
    if max_ops <= 0:
        return kernel
    uses = kir.def_use(kernel.body)
    values: Dict[str, ir.Expr] = {}
    for st in kir.statements(kernel.body):
        if not isinstance(st, kir.Compute) or st.at or st.dst.scope != "tile" or st.dst.name == keep or \
                len(uses.writers.get(st.dst.name, ())) != 1 or not 0 <= _index_value_ops(st.value) <= max_ops:
            continue
        values[st.dst.name] = st
    if not values:
        return kernel
    # every read must be a plain one in an elementwise loop over all the tile's axes (and not in its own loop)
    nest_of = {}
    for st in kernel.body:
        if isinstance(st, kir.Nest):
            for inner in st.body:
                nest_of[id(inner)] = st
    for name in list(values):
        axes = set(values[name].dst.axes)
        for reader, node in uses.readers.get(name, []):
            if node is None or node.indices is not None or node.guard is not None or \
                    not isinstance(reader, (kir.Compute, kir.Store)) or \
                    (isinstance(reader, kir.Compute) and reader.at) or \
                    not axes <= set(_loop_axes(reader, nest_of.get(id(reader)))):
                del values[name]
                break
    if not values:
        return kernel
    exprs = {name: st.value for name, st in values.items()}

    def sub(e):
        return ir.rebuild(e, lambda n: exprs.get(n.buffer) if isinstance(n, ir.Read) and n.indices is None
                          and n.guard is None else None)

    def drop(st):
        if isinstance(st, kir.Compute) and not st.at and st.dst.name in exprs:
            return []
        if isinstance(st, kir.Nest) and not st.body:
            return []
        return st
    body = kir.map_exprs(kir.rewrite(kernel.body, drop), sub)
    body = kir.rewrite(body, lambda st: [] if isinstance(st, kir.Nest) and not st.body else st)
    return dataclasses.replace(kernel, body=tuple(body))


@register("recompute_index_values")
def recompute_index_values_pass(module: kir.Module, ctx, max_ops: int = 16) -> kir.Module:
    """Tiles whose value is at most `max_ops` operations on axis indices, sizes and params (no buffer read)
    recomputed in the elementwise loops that read them (where the profile's tiles are fragments)."""
    if ctx.arch.tile_memory != "fragment":
        return module
    return module.replace(kernels=tuple(recompute_index_values(k, max_ops, module.keep) for k in module.kernels))
