"""TileKernels' expanded-layout functions of `tile_kernels.moe` (first release): rows moved between the
token layout and the expert-major layout of a mapping, on tkgen's kernels."""
from __future__ import annotations

import torch

from .. import ops
from ..runtime.arguments import positions, require, tensor_arg
from ..runtime.layouts import col_major


def expand_to_fused(x: torch.Tensor, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor):
    """(T_exp, H): row token_topk_to_pos[t, k] is x[t]; the padding rows are zero. The positions must be
    distinct and in [-1, T_exp) (ValueError otherwise: one read-back of their bounds)."""
    checked_mapping("moe.expand_to_fused", token_topk_to_pos, pos_to_expert)
    return ops.expand_to_fused(x, token_topk_to_pos, pos_to_expert)


def expand_to_fused_with_sf(x, num_per_channels: int, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor,
                            use_tma_aligned_col_major_sf: bool = False):
    """(expanded codes, expanded scales) of x = (codes, scales); the padding rows are zero. The scales come
    row-major, or with use_tma_aligned_col_major_sf in TileKernels' TMA-aligned column-major layout (a [T_exp,
    S] view of an [S, T_exp rounded up to 16 bytes] buffer; the kernel's rows copied into it)."""
    name = "moe.expand_to_fused_with_sf"
    require(isinstance(x, (tuple, list)) and len(x) == 2, name, "x", "must be a (codes, scales) pair", TypeError)
    q, sf = x
    require(num_per_channels in (32, 128), name, "num_per_channels", f"must be 32 or 128, got {num_per_channels!r}")
    checked_mapping(name, token_topk_to_pos, pos_to_expert)
    tensor_arg(name, "x[1] (the scales)", sf, (torch.float32, torch.int32), 2, "[T, S]")
    out, out_sf = ops.expand_to_fused_with_sf(q, sf.contiguous(), token_topk_to_pos, pos_to_expert)
    if use_tma_aligned_col_major_sf:
        out_sf = col_major(out_sf)
    return out, out_sf


def checked_mapping(name, token_topk_to_pos, pos_to_expert):
    """The mapping of a layout stored into (or whose gradient is): distinct positions within the rows
    pos_to_expert gives, which holds an expert or -1 per row."""
    tensor_arg(name, "pos_to_expert", pos_to_expert, (torch.int32,), 1, "[T_exp]")
    positions(name, "token_topk_to_pos", token_topk_to_pos, pos_to_expert.shape[0], distinct=True,
              others=(("pos_to_expert", pos_to_expert, -1, 2 ** 31 - 1),))


_OUT_FORMAT = {"": None, "e4m3": "e4m3"}


def reduce_fused(x, topk_weights, token_topk_to_pos: torch.Tensor, fp8_format: str = "", sf=None, out=None):
    """(T, H): for each token, the rows of x at its positions, each times its weight (and the row's scale
    when x = (x, x_sf)), summed in order with fused multiply-adds, times sf, in x's dtype or e4m3."""
    name = "moe.reduce_fused"
    x_sf = None
    if isinstance(x, (tuple, list)):
        require(len(x) == 2, name, "x", "must be a tensor or an (x, x_sf) pair", TypeError)
        x, x_sf = x
    require(fp8_format in _OUT_FORMAT, name, "fp8_format", f"must be '' or 'e4m3', got {fp8_format!r}")
    require(sf is None or fp8_format, name, "sf", "is given only with an FP8 output (fp8_format='e4m3')")
    tensor_arg(name, "x", x, (torch.bfloat16, torch.float32), 2, "[T_exp, H]")
    # positions read (not stored): a row may be read twice, none past the rows of x
    positions(name, "token_topk_to_pos", token_topk_to_pos, x.shape[0], distinct=False)
    fmt = _OUT_FORMAT[fp8_format] or {torch.bfloat16: "bf16", torch.float32: "fp32"}[x.dtype]
    result = ops.reduce_fused(x, token_topk_to_pos, topk_weights=topk_weights, x_sf=x_sf, sf=sf, out_format=fmt)
    if out is not None:
        out.copy_(result)
        return out
    return result
