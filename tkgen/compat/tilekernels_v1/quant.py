"""`tile_kernels.quant` of TileKernels' first release, on tkgen's kernels. Functions whose signature 2.1.0
kept are the 2.1.0 ones; the others are written out here with this release's arguments."""
from __future__ import annotations

import torch

from .._common import input_scale, ops, plain_in_group, quant_tensor, require, row_major, scale_format, tensor_arg
from ..tilekernels import quant as v2
from ..tilekernels.quant import (per_block_cast_lossless, per_token_cast_with_sf_only,  # noqa: F401
                                 unpack_from_e2m1fn_x2)


def cast_back(x, fmt: str, x_block_size, x_special_fmt=None):
    """Dequantize (q, sf) into `fmt` ('bf16' or 'fp32'), one scale per `x_block_size` block; with
    x_special_fmt='e5m6', q holds packed E5M6 codes (uint8 [T, H * 3 / 2])."""
    return v2.dequantize("quant.cast_back", x, fmt, x_block_size, x_special_fmt)


def per_token_cast_back(x, fmt: str, num_per_channels: int, x_special_fmt=None):
    return cast_back(x, fmt, (1, num_per_channels), x_special_fmt)


def per_token_cast(x, fmt: str, num_per_channels: int, x_block_size=None, use_tma_aligned_col_major_sf=False,
                   round_sf=False, use_packed_ue8m0=False):
    return v2.per_token_cast(x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                             use_packed_ue8m0)


def per_token_cast_with_precomputed_sf(x, fmt: str, num_per_channels: int, sf, use_tma_aligned_col_major_sf=False,
                                       round_sf=False, use_packed_ue8m0=False):
    return v2.per_token_cast_with_precomputed_sf(x, fmt, num_per_channels, sf, use_tma_aligned_col_major_sf,
                                                 round_sf, use_packed_ue8m0)


def per_block_cast(x, fmt: str, block_size, use_tma_aligned_col_major_sf=False, round_sf=False,
                   use_packed_ue8m0=False):
    return v2.per_block_cast(x, fmt, block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)


def per_block_cast_with_sf_only(x, fmt: str, block_size, use_tma_aligned_col_major_sf=False, round_sf=False,
                                use_packed_ue8m0=False):
    return v2.per_block_cast_with_sf_only(x, fmt, block_size, use_tma_aligned_col_major_sf, round_sf,
                                          use_packed_ue8m0)


def per_block_cast_with_precomputed_sf(x, fmt: str, block_size, sf, use_tma_aligned_col_major_sf=False,
                                       round_sf=False, use_packed_ue8m0=False):
    return v2.per_block_cast_with_precomputed_sf(x, fmt, block_size, sf, use_tma_aligned_col_major_sf, round_sf,
                                                 use_packed_ue8m0)


def per_channel_cast(x, fmt: str, num_per_tokens: int, round_sf=False):
    return v2.per_channel_cast(x, fmt, num_per_tokens, round_sf)


def per_channel_cast_and_transpose(x, fmt: str, num_per_tokens: int, round_sf=False):
    """(out [H, T], out_sf [T / num_per_tokens, H]): the per-channel cast, transposed."""
    return ops().per_channel_cast(x, fmt, num_per_tokens, "pow2" if round_sf else "fp32", True)


def per_channel_cast_fused(x, fmt: str, num_per_tokens: int, round_sf=False, num_per_channels=None,
                           pos_to_token=None):
    """(out [T_out, H], out_sf [T_out / num_per_tokens, H]) of x, or of a per-token quantized (q, sf), whose
    rows are first gathered at pos_to_token (T_out positions, -1 for a zero row): tkgen's
    per_channel_cast_gathered, one kernel."""
    name = "quant.per_channel_cast_fused"
    if pos_to_token is None:
        return v2.per_channel_cast(x, fmt, num_per_tokens, round_sf, num_per_channels)
    tensor_arg(name, "pos_to_token", pos_to_token, (torch.int32,), 1, "[T_out]")
    scale = "pow2" if round_sf else "fp32"
    if isinstance(x, (tuple, list)):
        q, sf = quant_tensor(name, x)
        # operators-v1.md 1.9: the first release takes e4m3 codes with row-major float32 scales here
        require(q.dtype == torch.float8_e4m3fn and input_scale(sf) == "fp32", name, "x",
                f"must be float8_e4m3fn codes with float32 scales with pos_to_token (the first release's "
                f"contract), got {q.dtype} codes with {sf.dtype} scales", TypeError)
        require(num_per_channels in (None, 128) and sf.shape[1] * 128 == q.shape[1], name, "num_per_channels",
                f"must be 128 (one float32 scale per 128 channels) with pos_to_token, got {num_per_channels} "
                f"and scales {tuple(sf.shape)} for codes {tuple(q.shape)}")
        return ops().per_channel_cast_gathered(q, pos_to_token, row_major(sf), fmt, num_per_tokens, 128, scale)
    require(num_per_channels is None, name, "num_per_channels", "is given only with a quantized (q, sf) input")
    return ops().per_channel_cast_gathered(x, pos_to_token, None, fmt, num_per_tokens, plain_in_group(x), scale)


def swiglu_forward_and_per_token_cast(x, fmt: str, num_per_channels: int, pos_to_token_topk=None, topk_weights=None,
                                      pos_to_expert=None, use_tma_aligned_col_major_sf=False, round_sf=False,
                                      use_packed_ue8m0=False, swiglu_clamp_value=None, clamped_count=None,
                                      sf_clamp_min=None):
    """The first release's MoE options are tkgen's own: routing weights read at positions, padding rows
    (pos_to_expert == -1) left unwritten, the int64[3] clamp counters added into; sf_clamp_min is the
    kernel's amax floor (compile-time, in place of 1e-4)."""
    name = "quant.swiglu_forward_and_per_token_cast"
    require(clamped_count is None or swiglu_clamp_value is not None, name, "clamped_count",
            "is given only with swiglu_clamp_value")
    q, sf, counts = ops().swiglu_forward_and_per_token_cast(
        x, pos_to_token_topk=pos_to_token_topk, topk_weights=topk_weights, pos_to_expert=pos_to_expert, fmt=fmt,
        group=num_per_channels, scale=scale_format(name, round_sf, use_packed_ue8m0), clamp=swiglu_clamp_value,
        amax_floor=1e-4 if sf_clamp_min is None else float(sf_clamp_min))
    if clamped_count is not None:
        clamped_count += counts
    return q, v2.laid_out(sf, use_tma_aligned_col_major_sf)


def swiglu_backward_and_per_token_cast(x, grad_out, weight, pos_to_token_topk, token_topk_to_pos,
                                       num_per_channels: int, round_sf=False, swiglu_clamp_value=None):
    """(out, (x_grad_fp8, x_grad_sf), x_grad, weight_grad): each row's weight read from `weight` [T, K] at
    its position (0 where negative), and the weight gradient scattered back to [T, K] (0 where
    token_topk_to_pos is -1). The gate's factor 1 + a * (1 - s) is one fused multiply-add, as this
    release's kernel and reference round it (da_fma; operators-v1.md 2.2)."""
    q, sf = v2.quant_tensor("quant.swiglu_backward_and_per_token_cast", x)
    flat = weight.reshape(-1)
    valid = pos_to_token_topk >= 0
    row_weight = torch.where(valid, flat[pos_to_token_topk.clamp(min=0).long()], torch.zeros((), device=flat.device))
    x_grad, fp8, fp8_sf, row_grad, out = ops().swiglu_backward_and_per_token_cast(
        q, sf, grad_out, num_per_channels, row_weight.contiguous(), "pow2" if round_sf else "fp32", recompute=True,
        clamp=swiglu_clamp_value, da_fma=True)
    rows = token_topk_to_pos.reshape(-1).long()
    weight_grad = torch.where(rows >= 0, row_grad[rows.clamp(min=0)], torch.zeros((), device=row_grad.device))
    return out, (fp8, fp8_sf), x_grad, weight_grad.reshape(weight.shape)


def swiglu_forward_and_per_channel_cast_and_transpose(x, fmt: str, num_per_tokens: int, round_sf=False,
                                                      without_transpose=False, swiglu_clamp_value=None):
    return ops().swiglu_forward_and_per_channel_cast_and_transpose(
        x, fmt, num_per_tokens, "pow2" if round_sf else "fp32", not without_transpose, swiglu_clamp_value)



__all__ = ["swiglu_forward_and_per_channel_cast_and_transpose", "per_channel_cast", "per_channel_cast_fused",
           "per_channel_cast_and_transpose", "swiglu_forward_and_per_token_cast", "swiglu_backward_and_per_token_cast",
           "unpack_from_e2m1fn_x2", "per_token_cast", "per_token_cast_with_precomputed_sf",
           "per_token_cast_with_sf_only", "per_block_cast", "per_block_cast_with_precomputed_sf",
           "per_block_cast_with_sf_only", "cast_back", "per_token_cast_back", "per_block_cast_lossless"]
