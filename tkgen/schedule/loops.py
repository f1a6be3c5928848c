"""Loops: passes `fuse` (elementwise statements over the same axes share one loop) and, on CUDA,
`coalesce_widening_loads` (a narrow load laid out for the wider store) and `vector_knobs`.
"""
from __future__ import annotations

import dataclasses
from typing import Dict

from ..ir import kernel as kir
from ..ir import prim as ir
from ..spec.signature import is_native, storage
from .passes import register


def fuse(body, software=lambda elem: False):
    """Consecutive Computes and Stores over the same axes share one loop; a load (a Compute that reads a
    tensor) gets a loop of its own: TileLang then vectorizes it to 16 bytes on sm_90a (a loop that also
    loads or computes other tiles gets 8-byte accesses). A store does not join a loop that calls a codec
    (a generated helper with branches): TileLang then stores element by element (an e2m1 decode in the
    loop of an e4m3 store made its stores scalar, 2.2x slower on the H200)."""
    out, open_ = [], None

    def codec(n):
        return isinstance(n, ir.Call) or (isinstance(n, (ir.Decode, ir.Encode)) and software(n.elem))

    def calls_helper(nest):
        return any(isinstance(c, kir.Compute) and any(codec(n) for n in ir.walk(c.value)) for c in nest.body)
    for st in body:
        if isinstance(st, kir.Loop):
            out.append(dataclasses.replace(st, body=tuple(fuse(st.body, software))))
            open_ = None
            continue
        if not isinstance(st, (kir.Compute, kir.Store)) or (isinstance(st, kir.Compute) and st.at):
            out.append(st)
            open_ = None
            continue
        axes = tuple(st.axes)
        load = isinstance(st, kir.Compute) and bool(ir.fetches(st.value))
        if load or open_ is None or open_.axes != axes or (isinstance(st, kir.Store) and calls_helper(open_)):
            open_ = kir.Nest(axes, (st,))
            out.append(open_)
        else:
            open_ = kir.Nest(axes, open_.body + (st,))
            out[-1] = open_
        if load:
            open_ = None
    return out


def _software_codec(catalog, arch, elem) -> bool:
    """Whether values of element type `elem` go through a generated codec on `arch` (packed or not native)."""
    fmt = catalog.elements.get(elem)
    return fmt is not None and (fmt.pack is not None or not is_native(catalog, arch, elem))


# -- 8. widening loads ------------------------------------------------------------------------------------
def coalesce_widening_loads(body, module: kir.Module, catalog, arch):
    """A load of elements narrower than what the kernel stores over the same axes (FP8 codes dequantized to
    bf16) is laid out for the store: the knob `vector_bytes` of the stored type per thread (the Nest holds
    the stored element's size, so the printed kernel is the same for every vector width). Left to itself the load
    gives each thread 16 bytes of the narrow input, so each thread's share of the store spans 32 bytes or
    more and every store instruction of a warp writes every other 16 bytes."""
    from ..spec.formats import ITEMSIZE
    tensors = {t.name: t for t in module.tensors}

    def size(tensor):
        elem = tensors[tensor].elem
        return None if elem.startswith("@") else ITEMSIZE.get(storage(catalog, arch, elem))

    widest: Dict[tuple, int] = {}
    for st in kir.statements(body):
        if isinstance(st, kir.Store) and size(st.tensor):
            widest[st.axes] = max(widest.get(st.axes, 0), size(st.tensor))
    out = []
    for st in body:
        if isinstance(st, kir.Nest) and st.axes in widest:
            loads = [size(t) for c in st.body if isinstance(c, kir.Compute) for t in ir.fetches(c.value)]
            if loads and all(n and n < widest[st.axes] for n in loads):
                st = dataclasses.replace(st, vector=widest[st.axes])
        elif isinstance(st, kir.Loop):
            inner = coalesce_widening_loads(st.body, module, catalog, arch)
            st = dataclasses.replace(st, body=tuple(inner))
        out.append(st)
    return out



def each_kernel(module, fn):
    """The module with `fn(body)` applied to every kernel's body."""
    return module.replace(kernels=tuple(dataclasses.replace(k, body=tuple(fn(k.body))) for k in module.kernels))


@register("fuse")
def fuse_pass(module: kir.Module, ctx) -> kir.Module:
    """Consecutive elementwise statements over the same axes share one loop (loads keep their own)."""
    return each_kernel(module, lambda body: fuse(body, lambda elem: _software_codec(ctx.catalog, ctx.arch, elem)))


@register("coalesce_widening_loads")
def coalesce_pass(module: kir.Module, ctx) -> kir.Module:
    """A load narrower than what is stored over the same axes is laid out for the store (`vector_bytes`
    of the stored type per thread)."""
    return each_kernel(module, lambda body: coalesce_widening_loads(body, module, ctx.catalog, ctx.arch))


@register("vector_knobs")
def vector_knobs_pass(module: kir.Module, ctx) -> kir.Module:
    """Where a loop is laid out for a store, the profile's vector width and tile budget become knobs (the
    printed kernel is then the same on profiles that differ only in them)."""
    if not any(isinstance(st, kir.Nest) and st.vector for k in module.kernels for st in kir.statements(k.body)):
        return module
    more = [("vector_bytes", ctx.sched.get("vector_bytes", ctx.arch.vector_bytes))]
    if "tile_elems" not in dict(module.knobs):
        more.append(("tile_elems", ctx.arch.tile_elems))
    return module.replace(knobs=module.knobs + tuple(more))
