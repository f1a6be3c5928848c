"""The argument conventions of tkgen's own API (docs/api-conventions.md) that the generated entry points
apply before a call: dtypes may be given as torch.dtype, a scale block as `scale_block=(rows, cols)`."""
from __future__ import annotations

import torch

from .format_names import FORMAT_OF_TORCH_NAME

# torch dtypes that name one element format each (those this torch has)
FORMAT_OF_DTYPE = {getattr(torch, name): fmt for name, fmt in FORMAT_OF_TORCH_NAME.items() if hasattr(torch, name)}


def as_format(v):
    """A format given as a torch.dtype, as its name; anything else as given (the op's check judges it)."""
    return FORMAT_OF_DTYPE.get(v, v) if type(v) is torch.dtype else v


def as_block(op_name: str, block, rows=None, cols=None):
    """(rows, cols) of a `scale_block` argument; `rows` or `cols` fixed where the op's blocks are one row
    (per token) or one channel (per channel)."""
    ok = isinstance(block, (tuple, list)) and len(block) == 2 and all(
        isinstance(n, int) and not isinstance(n, bool) for n in block)
    if not ok or (rows is not None and block[0] != rows) or (cols is not None and block[1] != cols):
        shape = f"({rows if rows is not None else 'rows'}, {cols if cols is not None else 'cols'})"
        raise ValueError(f"{op_name}: `scale_block` must be {shape}, two integers; got {block!r}")
    return tuple(block)
