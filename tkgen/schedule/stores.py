"""Stores: passes `stage_transposed_stores` (a store across the tile's order goes through shared memory)
and `inline_stored` (a value that is only stored is computed where it is stored).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List

from ..ir import kernel as kir
from ..ir import prim as ir
from .passes import register


def _index_axes(e) -> List[str]:
    return [n.axis for n in ir.walk(e) if isinstance(n, ir.Index)]


def stage_transposed_stores(body, module: kir.Module):
    """A store whose innermost storage dim is not indexed by the tile's innermost axis (consecutive
    threads would write addresses a row apart) is staged in shared memory in the tile's own order, each
    row padded by 16 bytes, and a second loop over the tensor's order stores it."""
    out = []
    for st in body:
        t = module.tensor(st.tensor) if isinstance(st, kir.Store) else None
        if t is None or t.scale or t.flat or st.accumulate or not st.axes or \
                st.axes[-1] in _index_axes(st.indices[-1]):
            out.append(st)
            continue
        stage = kir.Buffer(f"{st.tensor}_staged", st.axes, ir.RAW, scope="shared", elem=t.elem, pad=16)
        order = []
        for i in st.indices:
            order += [a for a in _index_axes(i) if a not in order]
        order += [a for a in st.axes if a not in order]
        out.append(kir.Compute(stage, st.value))
        out.append(dataclasses.replace(st, value=ir.Read(stage.name, ir.RAW), axes=tuple(order)))
    return out


# -- 5. inlining ------------------------------------------------------------------------------------------
def inline_stored(body, keep=None):
    """A Compute whose buffer only Stores over the same axes read (and that reads no tensor) is computed
    in those stores."""
    readers: Dict[str, list] = {}
    writers: Dict[str, int] = {}
    for st in kir.statements(body):
        for e in kir.exprs(st):
            for n in ir.walk(e):
                if isinstance(n, ir.Read):
                    readers.setdefault(n.buffer, []).append((st, n.indices is None and n.guard is None))
        for f in ("dst",):
            b = getattr(st, f, None)
            if isinstance(b, kir.Buffer):
                writers[b.name] = writers.get(b.name, 0) + 1
        if isinstance(st, kir.Reduce):
            readers.setdefault(st.src.name, []).append((st, False))
    inlined = {}
    for st in body:
        if not isinstance(st, kir.Compute) or st.at or ir.fetches(st.value) or st.dst.name == keep or \
                writers.get(st.dst.name) != 1:
            continue
        rs = readers.get(st.dst.name, [])
        if rs and all(isinstance(r, kir.Store) and plain and tuple(r.axes) == st.dst.axes and r in body for r, plain in rs):
            inlined[st.dst.name] = st.value
    if not inlined:
        return list(body)

    def sub(e):
        return ir.rebuild(e, lambda n: inlined.get(n.buffer) if isinstance(n, ir.Read) and n.indices is None else None)
    out = []
    for st in body:
        if isinstance(st, kir.Compute) and st.dst.name in inlined:
            continue
        if isinstance(st, kir.Store):
            st = dataclasses.replace(st, value=sub(st.value))
        out.append(st)
    return out


@register("stage_transposed_stores")
def stage_pass(module: kir.Module, ctx) -> kir.Module:
    """A store whose innermost storage dim is not the tile's innermost axis is staged in shared memory,
    so that consecutive threads write consecutive addresses."""
    return module.rewrite_main(lambda kernel: stage_transposed_stores(kernel.body, module))


@register("inline_stored")
def inline_pass(module: kir.Module, ctx) -> kir.Module:
    """A computed value that is only stored (over the same axes) is computed in its stores."""
    return module.rewrite_main(lambda kernel: inline_stored(kernel.body, module.keep))
