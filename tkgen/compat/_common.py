"""What the TileKernels-compatible modules share: their options as tkgen params, input scales told
apart as TileKernels does, its column-major scale layout, and the NotImplementedError of what is missing."""
from __future__ import annotations

import torch

from ..runtime.arguments import (Missing, checks_values, int_arg, positions, require,  # noqa: F401
                                 routing_ids, tensor_arg, value_bounds, within)
from ..runtime.layouts import col_major

ELEMENT_OF_DTYPE = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2", torch.int8: "e2m1"}


def ops():
    import tkgen.ops
    return tkgen.ops


def missing(name: str, release: str):
    """A stand-in for a TileKernels function tkgen has no kernel for: raises Missing naming it."""
    def fn(*args, **kwargs):
        raise Missing(name)
    fn.__name__ = fn.__qualname__ = name.rsplit(".", 1)[-1]
    fn.__doc__ = f"TileKernels {release}'s `{name}`: not built in tkgen yet (raises NotImplementedError)."
    return fn


def scale_format(name, round_sf: bool, use_packed_ue8m0: bool, use_e4m3_sf=None) -> str:
    """tkgen's scale format for TileKernels' flags: float32, rounded up to a power of two, packed UE8M0
    (four exponent bytes per int32, which TileKernels writes only for rounded scales), or e4m3 (ops whose
    TileKernels signature has use_e4m3_sf; None where it has not)."""
    if use_e4m3_sf:
        require(not round_sf, name, "use_e4m3_sf", "is incompatible with round_sf=True")
        return "e4m3"
    if use_packed_ue8m0:
        # both releases store exponent bytes only of rounded scales (operators-v1.md 0.3; 2.1.0 asserts it)
        require(round_sf, name, "use_packed_ue8m0", "needs round_sf=True: packed UE8M0 scales are powers of two")
        return "ue8m0"
    return "pow2" if round_sf else "fp32"


def input_scale(sf: torch.Tensor) -> str:
    """The scale format of a given scale tensor, told apart as TileKernels does: int32 is packed UE8M0,
    float8_e4m3fn is e4m3, anything else float32 (in either layout: tkgen reads it row-major)."""
    return {torch.int32: "ue8m0", torch.float8_e4m3fn: "e4m3"}.get(sf.dtype, "fp32")


def row_major(sf: torch.Tensor) -> torch.Tensor:
    return sf.contiguous()


def laid_out(sf: torch.Tensor, use_tma_aligned_col_major_sf: bool) -> torch.Tensor:
    return col_major(sf) if use_tma_aligned_col_major_sf else sf


def written_into(name: str, out, tensors: dict, params: dict):
    """Op `name` run with its kernel storing straight into the tensors of `out` (TileKernels' `out=`),
    which are returned. They must have the shapes, dtypes and strides tkgen allocates (ValueError
    otherwise). The call takes the full argument check, not the eager fast path."""
    from .. import registry
    from ..runtime.fastpath import run
    outs = run(registry.op_package(name).OP, tensors, params, out=out)
    return outs[0] if len(outs) == 1 else outs


def into(out, result):
    """TileKernels' `out=` where tkgen's op writes new tensors: the result copied into the given tensors,
    which are returned."""
    if out is None:
        return result
    if isinstance(result, torch.Tensor):
        return out.copy_(result)
    for o, r in zip(out, result):
        o.copy_(r)
    return out


CODE_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.uint8)


def plain_in_group(x: torch.Tensor) -> int:
    """The channel group of a plain input to ops that split channels by an input scale's group (none given,
    so any divisor of the width serves): 128 where it divides the width of an [T, H] input, else 32 (the op
    then reports a wrong rank itself)."""
    return 128 if x.dim() == 2 and x.shape[1] % 128 == 0 else 32


def quant_tensor(name, x):
    """(codes, scales) of a quantized argument `x`: 8-bit codes [rows, cols] and a scale tensor."""
    require(isinstance(x, (tuple, list, torch.Tensor)), name, "x",
            f"must be a (codes, scales) pair, got {type(x).__name__}", TypeError)
    require(isinstance(x, (tuple, list)) and len(x) == 2, name, "x",
            f"must be a (codes, scales) pair (TileKernels' QuantTensor), got {type(x).__name__}", TypeError)
    tensor_arg(name, "x", x[0], CODE_DTYPES, 2, "(codes [rows, cols], scales)")
    tensor_arg(name, "x", x[1], (torch.float32, torch.int32, torch.float8_e4m3fn), None, "(codes, scales)")
    return x[0], x[1]


def element_format(name, q: torch.Tensor, special=None) -> str:
    if special is not None:          # the first release's only special format
        require(special == "e5m6", name, "x_special_fmt", f"must be None or 'e5m6', got {special!r}")
        require(q.dtype == torch.uint8, name, "x", f"with x_special_fmt='e5m6' must hold packed E5M6 codes as "
                                                   f"uint8 [T, H * 3 / 2], got {q.dtype}", TypeError)
        return "e5m6"
    require(q.element_size() == 1, name, "x", f"must hold 8-bit codes (float8_e4m3fn, float8_e5m2, int8), got "
                                             f"{q.dtype}", TypeError)
    require(q.dtype in ELEMENT_OF_DTYPE, name, "x", f"must hold float8_e4m3fn, float8_e5m2 or int8 (FP4) codes, "
            f"got {q.dtype} (packed E5M6 uint8 codes are the first release's x_special_fmt='e5m6')", TypeError)
    return ELEMENT_OF_DTYPE[q.dtype]


def out_format(dtype: torch.dtype, name: str = "tkgen.compat", arg: str = "x") -> str:
    """"bf16" or "fp32" for the dtype of argument `arg` (TypeError naming it otherwise)."""
    fmt = {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype)
    require(fmt is not None, name, arg, f"must have dtype torch.bfloat16 or torch.float32, got {dtype}", TypeError)
    return fmt

