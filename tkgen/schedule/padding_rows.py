"""Padding rows of an output stored at positions (`padding: <input>`): a kernel of their own writes them as
zeros, before the kernel that stores the rows at their positions.

Rows stored at positions (`at:` with a view) are zero wherever no position names them. The reference starts
from zeros. A kernel would have the op fill the whole output first (a pass over all of it, as much as the
stores themselves); with `padding:`, the op leaves the output uninitialized and this kernel writes zeros
only in the rows where that input is negative (a mapping's padding rows), reading one integer per row. It
runs first, so that a row both named by a position and marked padding ends up holding the stored row, as
in the reference.
"""
from __future__ import annotations

import dataclasses

from ..spec import expr as E
from ..ir import prim as ir, kernel as kir
from ..spec import pyexpr as P
from ..ir.prim import BOOL, I32, I64, op
from .persistent import numel_of, unflatten
from .passes import register

ROW_BLOCK = 2048           # elements of a padding row per block


def zero_padding_rows(module: kir.Module) -> kir.Module:
    """The module with one kernel per output with `padding:`, first, zeroing its padding rows."""
    tensors = {t.name: t for t in module.tensors}
    axes, first = dict(module.axes), []
    for name, sig in module.meta["sigs"].items():
        if sig.role != "output" or not sig.padding or not sig.present:
            continue
        out, marks = tensors[name], tensors[sig.padding]
        row, col = f"padrow_{name}", f"padcol_{name}"
        # one row more than the output has (idle, guarded), so that a launch for an output of no rows is still
        # a valid grid (the row count is a runtime size: no max() of it before the launch)
        axes[row] = kir.Axis(row, E.Binary("+", out.shape[0], E.Num(1)))
        axes[col] = kir.Axis(col, numel_of(out.shape[1:]))
        dtype = I64 if marks.elem == "int64" else I32
        is_row = op("lt", ir.Index(row), ir.Size(P.py_expr(out.shape[0])))
        mark = ir.Decode(marks.elem, ir.Fetch(marks.name, (ir.Index(row),), guard=is_row), dtype)
        padding = op("and", is_row, op("lt", mark, ir.Const(0, dtype)))
        inside = op("lt", ir.Index(col), ir.Size(f"N_{col}"))
        at = (ir.Index(row),) + unflatten(ir.Index(col), out.shape[1:])
        # the storage's zero, whatever the element type: a read of the output that its guard never takes
        zero = ir.Fetch(name, at, guard=ir.Const(False, BOOL))
        store = kir.Store(name, at, zero, (row, col), guard=op("and", inside, padding))
        tiles = ((row, kir.Tile(E.Num(1), True)),
                 (col, kir.Tile(P.call("min", E.Name(f"N_{col}"), E.Num(ROW_BLOCK)), True)))
        first.append(kir.Kernel(f"pad_{name}", (store,), tiles=tiles))
    if not first:
        return module
    return dataclasses.replace(module, axes=axes, kernels=tuple(first) + tuple(module.kernels))


@register("zero_padding_rows")
def padding_rows_pass(module: kir.Module, ctx) -> kir.Module:
    """One kernel per output with `padding:`, first, zeroing its padding rows."""
    return zero_padding_rows(module)
