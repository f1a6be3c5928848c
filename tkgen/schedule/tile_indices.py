"""Pass `index_tiles`: the global index of an axis held in tiles written out in the IR, and the grid declared.

Before it, `ir.Index(a)` means the index of axis `a` in the tensors, however the kernel holds the axis. This
pass writes what that is, so that printers print expressions and invent no index arithmetic: inside a
tile over a split axis, `b_a * B_a + i_a` (the tile's index along the axis, its block, the element's
index inside the tile), the tile being the block's for a split axis (`Kernel.grid` then declares the
block variable), the chunk's for a streamed one (the loop over the chunks binds it), the packed axis's for
packets; where the axis is held whole it is the index inside the tile. No global index is left after it.
"""
from __future__ import annotations

import dataclasses

from ..ir import kernel as kir
from ..ir import prim as ir
from ..ir.prim import I32, op
from .passes import register


def index_tiles(module: kir.Module, kernel: kir.Kernel) -> kir.Kernel:
    """`kernel` with every global index written out (see the module docstring) and its grid declared."""
    def owner(axis):
        """The axis whose tile index counts the tiles of `axis` (the packed axis for packets), or None."""
        if kernel.tile(axis).streamed:
            return axis
        ax = module.axes[axis]
        base = ax.packets[0] if ax.packets else axis
        return base if kernel.tile(base).split else None

    def written(n):
        if not isinstance(n, ir.Index) or n.local:
            return None
        local = ir.Index(n.axis, True, n.dtype)
        by = owner(n.axis)
        if by is None:
            return local
        return op("add", op("mul", ir.Var(ir.tile_var(by), I32), ir.block(n.axis)), local)

    body = kir.map_exprs(kernel.body, lambda e: ir.rebuild(e, written))
    grid = () if kernel.persistent else \
        tuple(a for a in module.axes if kernel.tile(a).split and not module.axes[a].packets)
    return dataclasses.replace(kernel, body=tuple(body), grid=grid)


@register("index_tiles")
def index_tiles_pass(module: kir.Module, ctx) -> kir.Module:
    """Global indices written out: `b_a * B_a + i_a` inside a tile of a split or streamed axis; the grid's
    block variables declared (`Kernel.grid`)."""
    return module.replace(kernels=tuple(index_tiles(module, k) for k in module.kernels))
