"""TileKernels' expanded-layout functions of `tile_kernels.moe` (first release): rows moved between the
token layout and the expert-major layout of a mapping, on tkgen's kernels."""
from __future__ import annotations

import torch

from ._common import need, ops


def expand_to_fused(x: torch.Tensor, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor):
    """(T_exp, H): row token_topk_to_pos[t, k] is x[t]; the padding rows are zero."""
    return ops().expand_to_fused(x, token_topk_to_pos, pos_to_expert)


def expand_to_fused_with_sf(x, num_per_channels: int, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor,
                            use_tma_aligned_col_major_sf: bool = False):
    """(expanded codes, expanded row-major scales) of x = (codes, scales); the padding rows are zero."""
    q, sf = x
    need(not use_tma_aligned_col_major_sf, "moe.expand_to_fused_with_sf",
         "with use_tma_aligned_col_major_sf=True (a column-major layout of rows stored at positions)")
    assert num_per_channels in (32, 128), "num_per_channels is 32 or 128"
    return ops().expand_to_fused_with_sf(q, sf.contiguous(), token_topk_to_pos, pos_to_expert)


_OUT_FORMAT = {"": None, "e4m3": "e4m3"}


def reduce_fused(x, topk_weights, token_topk_to_pos: torch.Tensor, fp8_format: str = "", sf=None, out=None):
    """(T, H): for each token, the rows of x at its positions, each times its weight (and the row's scale
    when x = (x, x_sf)), summed in order with fused multiply-adds, times sf, in x's dtype or e4m3."""
    x_sf = None
    if isinstance(x, (tuple, list)):
        x, x_sf = x
    assert fp8_format in _OUT_FORMAT, f"fp8_format is '' or 'e4m3', found {fp8_format!r}"
    assert sf is None or fp8_format, "sf is given only with an FP8 output"
    fmt = _OUT_FORMAT[fp8_format] or {torch.bfloat16: "bf16", torch.float32: "fp32"}[x.dtype]
    result = ops().reduce_fused(x, token_topk_to_pos, topk_weights=topk_weights, x_sf=x_sf, sf=sf, out_format=fmt)
    if out is not None:
        out.copy_(result)
        return out
    return result
