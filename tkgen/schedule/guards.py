"""Out-of-range positions and NaN: passes `guard_out_of_range` and `mask_nan_reductions`.

Where a tile reaches past its axis (the rows of a last partial block, padding), tensors are neither read
nor written, and what a reduction over that axis reads there is its neutral value. On targets whose max
does not skip NaN, max-type reductions read a copy with NaNs replaced by the neutral value.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Set

from ..ir import kernel as kir
from ..ir import prim as ir
from ..ir.prim import F32, op
from ..lower.lowering import neutral
from .passes import register


def axes_of(e: ir.Expr, bufs: Dict[str, kir.Buffer]) -> Set[str]:
    """The axes an expression's value depends on: the indices it names and the axes of what it reads."""
    out = set()
    for n in ir.walk(e):
        if isinstance(n, ir.Index):
            out.add(n.axis)
        elif isinstance(n, ir.Read) and n.indices is None:
            out.update(bufs[n.buffer].axes)
    return out


def _in_range(axis, module):
    a = module.axes[axis]
    if a.packets:      # a packet lies in range when its first code does
        base, n = a.packets
        return op("lt", op("mul", ir.Index(axis), ir.i32(n)), ir.Size(f"N_{base}"))
    return op("lt", ir.Index(axis), ir.Size(f"N_{axis}"))


def guard_out_of_range(body, module: kir.Module, ranged: Set[str], covered: Dict[str, str]):
    """Guard tensor reads and writes at tile positions past an axis's extent (`ranged` axes), and make
    every buffer a reduction over such an axis reads hold the reduction's neutral value there.

    `covered`: axis -> an axis whose presence means a semantic guard already excludes those positions (the
    rows inside a row block: `b * N_r + r < T` also rules out blocks past the end)."""
    if not ranged:
        return list(body)
    bufs = kir.buffers(body)

    def conds(axes):
        return ir.conj(*[_in_range(a, module) for a in sorted(ranged, key=list(module.axes).index)
                         if a in axes and covered.get(a) not in axes])

    def guard_fetches(e):
        def fn(n):
            if isinstance(n, ir.Fetch):
                extra = conds(set().union(*[axes_of(i, bufs) for i in n.indices]))
                if extra is not None:
                    return dataclasses.replace(n, guard=ir.conj(n.guard, extra))
            return None
        return ir.rebuild(e, fn)

    def walk(stmts):
        out = []
        for st in stmts:
            if isinstance(st, kir.Compute):
                st = dataclasses.replace(st, value=guard_fetches(st.value))
            elif isinstance(st, kir.Store):
                st = dataclasses.replace(st, value=guard_fetches(st.value), guard=ir.conj(st.guard, conds(set(st.axes))))
            elif isinstance(st, kir.Loop):
                st = dataclasses.replace(st, body=tuple(walk(st.body)))
            out.append(st)
        return out
    body = walk(body)
    return _neutral_where_reduced(body, module, ranged, covered)


def _zero_outside(body, ranged) -> Set[str]:
    """Buffers that hold 0 wherever a ranged axis runs past its extent: guarded loads, and absmax or sum
    reductions of such buffers."""
    zero = set()
    for st in kir.statements(body):
        if isinstance(st, kir.Compute) and not st.at and isinstance(st.value, ir.Decode) and \
                isinstance(st.value.arg, ir.Fetch) and st.value.arg.guard is not None:
            zero.add(st.dst.name)
        elif isinstance(st, kir.Reduce) and st.kind in ("absmax", "sum") and st.src.name in zero:
            zero.add(st.dst.name)
    return zero


def _neutral_where_reduced(body, module, ranged, covered):
    """Each buffer that a reduction over a ranged axis reads: every Compute writing it takes the neutral
    value past the extent (a buffer reduced with two different neutral values, or written by a reduction,
    gets a masked copy per reduction instead)."""
    zero = _zero_outside(body, ranged)
    need: Dict[str, Dict[str, str]] = {}        # buffer -> {ranged axis: reduction kind}
    for st in kir.statements(body):
        if isinstance(st, kir.Reduce) and st.axis in ranged:
            if (st.kind in ("absmax", "sum") and st.src.name in zero) or st.src.pad_safe:
                continue
            need.setdefault(st.src.name, {})[st.axis] = st.kind
        elif isinstance(st, kir.Gemm) and st.k in ranged:        # a matmul adds its operands' products
            for b in (st.a, st.b):
                if b.name not in zero and not b.pad_safe:
                    need.setdefault(b.name, {})[st.k] = "sum"
    # a reduction of the same kind over another axis is neutral where its source is: the need moves to the
    # source (the ones of a count, reduced axis by axis, are masked once)
    producers = {st.dst.name: st for st in kir.statements(body) if isinstance(st, kir.Reduce)}
    moved = True
    while moved:
        moved = False
        for name in list(need):
            st, kinds = producers.get(name), set(need[name].values())
            if st is not None and kinds == {st.kind} and st.kind != "absmax" and st.src.name not in zero:
                need.setdefault(st.src.name, {}).update(need.pop(name))
                moved = True
    copies = {b for b, m in need.items() if len(set(m.values())) > 1 or b in producers}
    for st in kir.statements(body):
        if isinstance(st, kir.Gemm) and {st.a.name, st.b.name} & copies:
            raise ValueError(f"a matmul over padded axis {st.k!r} of a reduction's result (stream the axis instead)")

    def in_range(axes):
        return ir.conj(*[_in_range(a, module) for a in sorted(axes, key=list(module.axes).index)])

    def walk(stmts):
        out = []
        for st in stmts:
            if isinstance(st, kir.Compute) and st.dst.name in need and st.dst.name not in copies:
                kind = next(iter(need[st.dst.name].values()))
                st = dataclasses.replace(st, value=op("select", in_range(need[st.dst.name]), st.value,
                                                      neutral(kind, st.dst.dtype)))
            elif isinstance(st, kir.Reduce) and st.src.name in copies and st.axis in need[st.src.name]:
                masked = kir.Buffer(f"{st.src.name}_for_{st.kind}_over_{st.axis}", st.src.axes, st.src.dtype)
                out.append(kir.Compute(masked, op("select", _in_range(st.axis, module),
                                                  ir.Read(st.src.name, st.src.dtype), neutral(st.kind, st.src.dtype))))
                st = dataclasses.replace(st, src=masked)
            elif isinstance(st, kir.Loop):
                st = dataclasses.replace(st, body=tuple(walk(st.body)))
            out.append(st)
        return out
    return walk(body)


# -- 3. NaN in max reductions -----------------------------------------------------------------------------
def mask_nan_reductions(body):
    """Max-type float reductions read a copy with NaN replaced by the neutral value (the C target's max
    keeps whichever operand its comparison picks, so a NaN last in a row would win); every target then
    skips NaN, as the reference does."""
    out = []
    for st in body:
        if isinstance(st, kir.Reduce) and st.kind != "sum" and st.src.dtype == F32:
            masked = kir.Buffer(f"{st.src.name}_for_{st.kind}_over_{st.axis}", st.src.axes, F32)
            src = ir.Read(st.src.name, F32)
            out.append(kir.Compute(masked, op("select", op("isnan", src), neutral(st.kind, F32), src)))
            st = dataclasses.replace(st, src=masked)
        elif isinstance(st, kir.Loop):
            st = dataclasses.replace(st, body=tuple(mask_nan_reductions(st.body)))
        out.append(st)
    return out


@register("guard_out_of_range", establishes=("guarded",))
def guard_pass(module: kir.Module, ctx) -> kir.Module:
    """Tensor reads and writes guarded past the extent of padded axes and of the split rows; what a
    reduction over such an axis reads there is its neutral value."""
    tiles = module.kernels[0].tiles
    ranged = {a for a, t in tiles if t.padded}
    if ctx.dyn in dict(tiles):
        ranged.add(ctx.dyn)
    covered = {ctx.dyn: ctx.spec.row_inner} if ctx.spec.row_inner else {}
    return module.rewrite_main(lambda kernel: guard_out_of_range(kernel.body, module, ranged, covered))


@register("mask_nan_reductions")
def mask_nan_pass(module: kir.Module, ctx) -> kir.Module:
    """On profiles whose max does not skip NaN (`max_skips_nan: false`), max-type reductions read a copy
    with NaN replaced by the neutral value."""
    if ctx.arch.max_skips_nan:
        return module
    return module.rewrite_main(lambda kernel: mask_nan_reductions(kernel.body))
