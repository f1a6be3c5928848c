"""Schedule rewrites of the tile matmul (`kir.Gemm`), one per kind of target.

- On targets with fragments (CUDA), `place_gemm` prepares a `T.gemm`: its operands live in shared memory,
  its accumulator in a fragment whose layout the matmul decides, so what reads the result afterwards reads
  a shared copy of it (a loop that read the fragment next to other fragments left TileLang no layout
  that fits both); `gemm_tiles` pads the result's whole axes to a power of two of at least 16 (a warp's
  share of M is 16 rows, of N a multiple of 8: 24 rows of fn become 32, the padding loading zeros and
  never stored) and a whole k axis to one of at least 8 (a TF32 step), the padding of k holding zeros.
- On the C target (no `T.gemm`), `expand_gemm` writes it as the ordered loop the reference runs: for each
  k in ascending order, c = c + a[:, k] * b[:, k] over the result's tile, from +0.0.
"""
from __future__ import annotations

import dataclasses
from typing import List

from ..spec import expr as E
from ..ir import prim as ir, kernel as kir
from ..spec import pyexpr as P
from ..ir.prim import F32, I32, op
from .passes import register

WARP_ROWS = 16            # what a warp's part of a T.gemm tile is a multiple of, in M and in N


def gemms(body) -> List[kir.Gemm]:
    return [st for st in kir.statements(body) if isinstance(st, kir.Gemm)]


def gemm_tiles(tiles, body, k_step):
    """(tiles, checks): the whole axes of each matmul's result padded to a power of two, WARP_ROWS at least,
    and its whole k axis to one of `k_step` at least (a tensor-core step); a result axis split across
    blocks is checked to be a multiple of WARP_ROWS (the factory raises ValueError otherwise)."""
    found = gemms(body)
    least = {a: WARP_ROWS for g in found for a in g.c.axes}
    for g in found:
        least.setdefault(g.k, k_step)
    out, checks = [], []
    for name, tile in tiles:
        if name in least and tile.split and least[name] == WARP_ROWS:
            checks.append((E.Binary("==", E.Binary("%", E.Name(ir.block_name(name)), E.Num(WARP_ROWS)), E.Num(0)),
                           f"a matmul's block of axis {name} must be a multiple of {WARP_ROWS} (a warp's share of "
                           "T.gemm)"))
        elif name in least and not tile.split and not tile.streamed:
            # a power of two: the axis may also be reduced (warp reductions want one)
            tile = kir.Tile(P.call("pad_pow2", P.call("max", E.Name(ir.extent_name(name)), E.Num(least[name]))), False, True)
        out.append((name, tile))
    return out, checks


def _rename_reads(st, old, new):
    return kir.map_exprs([st], lambda e: ir.rebuild(
        e, lambda n: dataclasses.replace(n, buffer=new) if isinstance(n, ir.Read) and n.buffer == old else None))[0]


def place_gemm(body):
    """Operands in shared memory, and a shared copy of each result for what follows the statement that
    computes it (the matmul itself, or the loop over the chunks of its streamed axis)."""
    found = gemms(body)
    if not found:
        return list(body)
    body = kir.rescope(body, {b.name: "shared" for g in found for b in (g.a, g.b)})
    out = []
    copies = {}
    for st in body:
        for old, new in copies.items():
            st = _rename_reads(st, old, new)
        out.append(st)
        for g in gemms([st]):
            copy = kir.Buffer(f"{g.c.name}_shared", g.c.axes, F32, "shared")
            # a loop of its own: fused with the readers, the fragment would meet theirs again
            out.append(kir.Nest(g.c.axes, (kir.Compute(copy, ir.Read(g.c.name, F32)),)))
            copies[g.c.name] = copy.name
    return out


def expand_gemm(body):
    """Each matmul as its ordered loop over k (from +0.0 unless it accumulates)."""
    def expanded(st):
        if not isinstance(st, kir.Gemm):
            return st
        step = ir.Var(f"r_{st.k}", I32)

        def at(b):
            return ir.Read(b.name, F32, tuple(step if a == st.k else ir.Index(a, local=True) for a in b.axes))
        add = op("add", ir.Read(st.c.name, F32), op("mul", at(st.a), at(st.b)))
        loop = kir.Loop(step.name, ir.block(st.k), (kir.Compute(st.c, add),))
        return [loop] if st.accumulate else [kir.Fill(st.c, ir.c(0.0)), loop]
    return kir.rewrite(body, expanded)


@register("place_gemm")
def place_gemm_pass(module: kir.Module, ctx) -> kir.Module:
    """Tile matmuls as T.gemm, their operands and result placed where the tensor cores read them."""
    return module.rewrite_main(lambda kernel: place_gemm(kernel.body))


@register("expand_gemm")
def expand_gemm_pass(module: kir.Module, ctx) -> kir.Module:
    """Tile matmuls as an ordered loop of multiply-adds (targets without fragments)."""
    return module.rewrite_main(lambda kernel: expand_gemm(kernel.body))
