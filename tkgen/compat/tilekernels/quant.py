"""`tile_kernels.quant` of TileKernels 2.1.0, on tkgen's kernels."""
from __future__ import annotations

from typing import Optional

import torch

from ...runtime.arguments import need
from ...runtime.conventions import as_format
from ...runtime.ops import TORCH_DTYPES as _TORCH
from .._common import (element_format, input_scale, int_arg, into, laid_out, ops, out_format, plain_in_group,
                       quant_tensor, require, row_major, scale_format, tensor_arg, written_into)
from .config import amax_floor


def per_token_cast(x, fmt: str, num_per_channels: int, x_block_size=None, use_tma_aligned_col_major_sf=False,
                   round_sf=False, use_packed_ue8m0=False, use_e4m3_sf=False, stochastic_cast=False, out=None):
    """(q, sf); with `out=(q, sf)` the kernel writes into those tensors (laid out as tkgen allocates them:
    q contiguous, sf row-major, or column-major with use_tma_aligned_col_major_sf). A quantized x = (codes,
    scales: float32, packed UE8M0 or float8_e4m3fn) with `x_block_size` is re-quantized by tkgen's
    per_token_cast_requant (`out=` copied into), with use_e4m3_sf into e4m3 scales, with stochastic_cast by
    per_token_cast_requant_stochastic (into e4m3)."""
    name = "quant.per_token_cast"
    if x_block_size is not None or not isinstance(x, torch.Tensor):
        require(x_block_size is not None, name, "x_block_size", "is required with a quantized (q, sf) input")
        need(not stochastic_cast or as_format(fmt) == "e4m3", name, "of a quantized input with stochastic_cast=True "
                                                                     "into e2m1")
        return into(out, _requant(name, x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf,
                                  scale_format(name, round_sf, use_packed_ue8m0, use_e4m3_sf), stochastic_cast,
                                  use_e4m3_sf))
    params = dict(fmt=fmt, group=num_per_channels, scale=scale_format(name, round_sf, use_packed_ue8m0, use_e4m3_sf),
                  sf_layout="col" if use_tma_aligned_col_major_sf else "row",
                  **amax_floor(as_format(fmt), use_e4m3_sf))
    op = "per_token_cast"
    if stochastic_cast:           # tkgen's per_token_cast_stochastic: e4m3 only (e2m1's random bits: not built)
        need(as_format(fmt) == "e4m3", name, "with stochastic_cast=True into e2m1")
        op = "per_token_cast_stochastic"
        params.pop("fmt")
    if out is not None:
        return written_into(op, tuple(out), {"x": x}, params)
    return getattr(ops(), op)(x, **params)


IN_COLS = (128, 32, 16, 2)      # the input blocks' widths per_token_cast_requant has kernels for (FP4 codes come
                                # two to a byte, so none narrower than 2)


def _requant(name, x, fmt, num_per_channels, x_block_size, col_major_sf, scale, stochastic=False, e4m3_sf=False):
    """tkgen's per_token_cast_requant of (q, sf) with one scale per x_block_size block. Input blocks wider
    than the output groups, or of sizes other than 1, 32 or 128 rows by 32 or 128 channels (any rows, a multiple
    of 32 channels), get their scales repeated to smaller blocks first (a layout change: bytes for UE8M0)."""
    q, sf = quant_tensor(name, x)
    in_fmt, in_scale = element_format(name, q), input_scale(sf)
    require(in_fmt in ("e4m3", "e2m1"), name, "x", f"must hold float8_e4m3fn or FP4 (int8) codes when quantized, as "
            f"TileKernels' quantized inputs do, got {q.dtype}", TypeError)
    rows, cols = x_block_size
    require(rows > 0 and cols > 0, name, "x_block_size", f"must be two positive sizes, got {tuple(x_block_size)}")
    sf = row_major(sf)
    # blocks the op has no param value for are repeated to ones it has: rows to single rows, channels to the
    # widest of 32, 16 and 2 that divides them
    to_rows = rows if rows in (1, 32, 128) else 1
    need(cols % 2 == 0, name, f"of a quantized input in {tuple(x_block_size)} blocks (an odd number of channels)")
    to_cols = cols if cols in IN_COLS else next(c for c in IN_COLS[1:] if cols % c == 0)
    if to_cols > num_per_channels and num_per_channels in (32, 128):
        to_cols = num_per_channels
    if (to_rows, to_cols) != (rows, cols):
        blocks = (2 * q.shape[1] if in_fmt == "e2m1" else q.shape[1]) // cols
        sf = repeat_scales(sf, in_scale, rows // to_rows, cols // to_cols, q.shape[0], blocks)
        rows, cols = to_rows, to_cols
    params = dict(in_fmt=in_fmt, group=num_per_channels, in_rows=rows, in_cols=cols, in_scale=in_scale, scale=scale,
                  sf_layout="col" if col_major_sf else "row", **amax_floor(as_format(fmt), e4m3_sf))
    if stochastic:                # tkgen's per_token_cast_requant_stochastic: e4m3 only
        return ops().per_token_cast_requant_stochastic(q, sf, **params)
    return ops().per_token_cast_requant(q, sf, fmt=fmt, **params)


def repeat_scales(sf, in_scale, row_rep, col_rep, rows, blocks):
    """Row-major scales of `blocks` blocks per row, each repeated row_rep times down (cut at `rows`) and col_rep
    times across: the scales of blocks that many times smaller (a layout change, by bytes: float32 as int32,
    e4m3 as uint8, packed UE8M0 as its exponent bytes, four per int32 again, the last word padded with 0)."""
    if in_scale == "ue8m0":
        b = sf.view(torch.uint8)[:, :blocks].repeat_interleave(row_rep, dim=0)[:rows].repeat_interleave(col_rep, dim=1)
        return torch.nn.functional.pad(b, (0, -b.shape[1] % 4)).contiguous().view(torch.int32)
    raw = sf.view(torch.int32 if sf.element_size() == 4 else torch.uint8)
    return raw.repeat_interleave(row_rep, dim=0)[:rows].repeat_interleave(col_rep, dim=1).contiguous().view(sf.dtype)


def per_token_cast_with_sf_only(x, fmt: str, num_per_channels: int, use_tma_aligned_col_major_sf=False,
                                round_sf=False, use_packed_ue8m0=False, use_e4m3_sf=False, out_sf=None):
    params = dict(fmt=fmt, group=num_per_channels,
                  scale=scale_format("quant.per_token_cast_with_sf_only", round_sf, use_packed_ue8m0, use_e4m3_sf),
                  **amax_floor(as_format(fmt), use_e4m3_sf))
    if out_sf is not None and not use_tma_aligned_col_major_sf:
        return written_into("per_token_cast_with_sf_only", (out_sf,), {"x": x}, params)
    sf = ops().per_token_cast_with_sf_only(x, **params)
    return into(out_sf, laid_out(sf, use_tma_aligned_col_major_sf))


def per_token_cast_with_precomputed_sf(x, fmt: str, num_per_channels: int, sf, use_tma_aligned_col_major_sf=False,
                                       round_sf=False, use_packed_ue8m0=False, use_e4m3_sf=False, out=None):
    """q = fmt(x * (1 / sf)); float32 scales, float8_e4m3fn ones (use_e4m3_sf), or packed UE8M0 ones (int32,
    four exponent bytes a word, as TileKernels tells them by dtype), decoded first."""
    name = "quant.per_token_cast_with_precomputed_sf"
    in_scale = input_scale(sf)
    require((in_scale == "e4m3") == bool(use_e4m3_sf), name, "sf", f"must be float8_e4m3fn exactly when "
            f"use_e4m3_sf=True, got {sf.dtype} with use_e4m3_sf={use_e4m3_sf}", TypeError)
    params = dict(fmt=fmt, group=num_per_channels, in_scale=in_scale)
    if out is not None:
        return written_into("per_token_cast_with_precomputed_sf", (out,), {"x": x, "sf": row_major(sf)}, params)
    return ops().per_token_cast_with_precomputed_sf(x, row_major(sf), **params)


def cast_back(x, fmt: str, x_block_size, x_special_fmt: Optional[str] = None):
    """Dequantize (q, sf) into `fmt` ('bf16' or 'fp32'), one scale per `x_block_size` block. x_special_fmt is
    reserved in 2.1.0 (E5M6 was removed): anything but None is a ValueError."""
    name = "quant.cast_back"
    require(x_special_fmt is None, name, "x_special_fmt", f"is reserved and must be None in TileKernels 2.1.0 "
            f"(E5M6 is the first release's: tkgen.compat.tilekernels_v1), got {x_special_fmt!r}")
    return dequantize(name, x, fmt, x_block_size)


def dequantize(name, x, fmt, x_block_size, special=None):
    """tkgen's cast_back of (q, sf): `special` 'e5m6' (the first release's) reads packed uint8 E5M6 codes."""
    q, sf = quant_tensor(name, x)
    rows, cols = x_block_size
    return ops().cast_back(q, row_major(sf), element_format(name, q, special), cols, input_scale(sf), fmt,
                           block_rows=rows)


def per_token_cast_back(x, fmt: str, num_per_channels: int, x_special_fmt: Optional[str] = None):
    return cast_back(x, fmt, (1, num_per_channels), x_special_fmt=x_special_fmt)


def per_token_cast_and_cast_back(x, fmt: str, num_per_channels: int, round_sf=False, use_e4m3_sf=False):
    """In place: x becomes its own per-token cast, cast back into x's dtype."""
    scale = scale_format("quant.per_token_cast_and_cast_back", round_sf, False, use_e4m3_sf)
    tensor_arg("quant.per_token_cast_and_cast_back", "x", x, (torch.bfloat16, torch.float32))
    x.copy_(ops().per_token_cast_and_cast_back(x, fmt, num_per_channels, scale, out_format(x.dtype),
                                               **amax_floor(as_format(fmt), use_e4m3_sf)))


def per_block_cast(x, fmt: str, block_size, use_tma_aligned_col_major_sf=False, round_sf=False,
                   use_packed_ue8m0=False, out=None):
    """(q, sf); a given `out=(q, sf)` is written by the kernel where sf is row-major, else copied into."""
    params = dict(fmt=fmt, block_rows=block_size[0], block_cols=block_size[1],
                  scale=scale_format("quant.per_block_cast", round_sf, use_packed_ue8m0), **amax_floor(as_format(fmt)))
    if out is not None and not use_tma_aligned_col_major_sf:
        return written_into("per_block_cast", tuple(out), {"x": x}, params)
    q, sf = ops().per_block_cast(x, **params)
    return into(out, (q, laid_out(sf, use_tma_aligned_col_major_sf)))


def per_block_cast_with_sf_only(x, fmt: str, block_size, use_tma_aligned_col_major_sf=False, round_sf=False,
                                use_packed_ue8m0=False, out_sf=None):
    params = dict(fmt=fmt, block_rows=block_size[0], block_cols=block_size[1],
                  scale=scale_format("quant.per_block_cast_with_sf_only", round_sf, use_packed_ue8m0),
                  **amax_floor(as_format(fmt)))
    if out_sf is not None and not use_tma_aligned_col_major_sf:
        return written_into("per_block_cast_with_sf_only", (out_sf,), {"x": x}, params)
    return into(out_sf, laid_out(ops().per_block_cast_with_sf_only(x, **params), use_tma_aligned_col_major_sf))


def per_block_cast_with_precomputed_sf(x, fmt: str, block_size, sf, use_tma_aligned_col_major_sf=False,
                                       round_sf=False, use_packed_ue8m0=False, out=None):
    name = "quant.per_block_cast_with_precomputed_sf"
    # TileKernels asserts row-major float32 scales here (operators-v1.md 1.3; 2.1.0 kept it); tkgen also reads a
    # column-major float32 one (copied row-major)
    tensor_arg(name, "x", x, (torch.bfloat16, torch.float32), 2, "[T, H]")
    tensor_arg(name, "sf", sf, (torch.float32,), 2, "[ceil(T / block_rows), ceil(H / block_cols)]")
    params = dict(fmt=fmt, block_rows=block_size[0], block_cols=block_size[1])
    if out is not None:
        return written_into("per_block_cast_with_precomputed_sf", (out,), {"x": x, "sf": row_major(sf)}, params)
    return ops().per_block_cast_with_precomputed_sf(x, row_major(sf), **params)


def per_block_cast_lossless(x, fmt: str, x_block_size, out_block_size, use_tma_aligned_col_major_sf=False,
                            round_sf=False, use_packed_ue8m0=False):
    """(q, sf) in FP4 with power-of-two scales per x_block_size block to e4m3 with one power-of-two scale per
    output block. Input blocks of several rows, or of widths other than 32 and 16 channels, have their scales
    repeated to 1 x 32, 1 x 16 or 1 x 2 blocks first (a layout change: the largest exponent over an output block
    is the same)."""
    name = "quant.per_block_cast_lossless"
    q, sf = quant_tensor(name, x)
    require(fmt == "e4m3", name, "fmt", f"must be 'e4m3' (TileKernels asserts it), got {fmt!r}")
    require(q.dtype == torch.int8, name, "x", f"must hold FP4 codes two per int8, got {q.dtype}", TypeError)
    (in_rows, in_cols), (rows, cols) = x_block_size, out_block_size
    require(in_rows > 0 and in_cols > 0 and rows % in_rows == 0 and cols % in_cols == 0, name, "out_block_size",
            f"must be a multiple of x_block_size in both dims, got {tuple(out_block_size)} and {tuple(x_block_size)}")
    sf = row_major(sf)
    need(in_cols % 2 == 0, name, f"of FP4 codes in {tuple(x_block_size)} blocks (an odd number of channels)")
    unit = next(c for c in (32, 16, 2) if in_cols % c == 0)     # the op's input blocks: 1 x 32, 1 x 16 or 1 x 2
    if in_rows > 1 or in_cols > unit:
        sf = repeat_scales(sf, input_scale(sf), in_rows, in_cols // unit, q.shape[0], 2 * q.shape[1] // in_cols)
    return ops().per_block_cast_lossless(q, sf, rows, cols, unit, input_scale(sf),
                                         "ue8m0" if use_packed_ue8m0 else "fp32",
                                         "col" if use_tma_aligned_col_major_sf else "row")


def per_channel_cast(x, fmt: str, num_per_tokens: int, round_sf=False, num_per_channels=None,
                     use_packed_ue8m0=False):
    """(out, out_sf) of a plain x or of a per-token quantized (q, sf) with `num_per_channels` channels per
    input scale; out_sf float32 [T / num_per_tokens, H], or with use_packed_ue8m0 int32
    [ceil(T / num_per_tokens / 4), H], four row groups per word. Without num_per_channels the input scales'
    shape tells their group width (`_input_group`). A plain x has no input scales for num_per_channels to
    describe: the result is the same with it as without it."""
    name = "quant.per_channel_cast"
    if isinstance(x, (tuple, list)):
        q, sf = quant_tensor(name, x)
        require(q.dtype == torch.float8_e4m3fn, name, "x", f"must hold float8_e4m3fn codes when quantized "
                f"(operators-v2.md 2.13), got {q.dtype}", TypeError)
        in_group = num_per_channels if num_per_channels is not None else _input_group(name, q, sf)
        out, out_sf = ops().per_channel_cast_from_fp8(q, row_major(sf), fmt, num_per_tokens, in_group,
                                                      input_scale(sf), scale_format(name, round_sf, use_packed_ue8m0),
                                                      **amax_floor(as_format(fmt)))
        return out, out_sf.T
    if use_packed_ue8m0:          # TileKernels' col-pack (four row groups per word): per_channel_cast_from_fp8's
        scale = scale_format(name, round_sf, True)
        tensor_arg(name, "x", x, (torch.bfloat16, torch.float32), 2, "[T, H]")
        out, out_sf = ops().per_channel_cast_from_fp8(x, None, fmt, num_per_tokens, plain_in_group(x), "fp32", scale,
                                                      **amax_floor(as_format(fmt)))
        return out, out_sf.T
    return ops().per_channel_cast(x, fmt, num_per_tokens, "pow2" if round_sf else "fp32", **amax_floor(as_format(fmt)))


def _input_group(name, q, sf) -> int:
    """Channels per input scale of a per-token quantized (q [T, H], sf): H / sf's width for float32 or e4m3
    scales, one per group; for packed UE8M0 words (four scales each, the last word padded) the group of
    operators-v2.md 2.13's 32 and 128 whose word count ceil(H / group / 4) is sf's width. Where both fit
    (H = 128: one word either way) or neither does, num_per_channels must say it (ValueError)."""
    cols, width = q.shape[1], sf.shape[1]
    if input_scale(sf) != "ue8m0":
        return cols // max(1, width)
    fits = [g for g in (32, 128) if cols % g == 0 and -(-cols // g // 4) == width]
    told = " and ".join(map(str, fits)) or "neither 32 nor 128"
    require(len(fits) == 1, name, "num_per_channels", f"must be given for packed UE8M0 input scales of "
            f"{width} words per row of {cols} channels: groups of {told} fit them")
    return fits[0]


def _swiglu_moe(name, x, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor, clamp_value,
                clamped_count, backward=False):
    """tkgen's SwiGLU arguments for TileKernels 2.1.0's: gathered per-row weights, the routed scaling factor
    (with weights only), the clamp, and the psum layout as pos_to_expert (padding rows -1, which tkgen's
    SwiGLU ops skip in the forward and zero-fill in the backward)."""
    require(routed_scaling_factor is None or topk_weights is not None, name, "routed_scaling_factor",
            "is given only with topk_weights")
    require(clamped_count is None or clamp_value is not None, name, "clamped_count", "is given only with clamp_value")
    moe = dict(weights=topk_weights, clamp=clamp_value,
               routed_scaling_factor=1.0 if routed_scaling_factor is None else routed_scaling_factor)
    if psum_num_tokens_per_expert is not None:
        moe["pos_to_expert"] = _psum_rows(name, psum_num_tokens_per_expert, x.shape[0], backward)
    return moe


def _psum_rows(name, psum, rows, backward):
    """pos_to_expert [rows] of 2.1.0's psum layout (config.get_token_alignment() A): expert e's valid rows
    are [align(psum[e - 1], A), psum[e]), the rows between -1 (padding). Rows at or after align(psum[-1], A)
    are padding to the forward (its walk ends at the last expert, as TileKernels' torch mask has it) and
    ordinary rows to the backward (operators-v2.md 2.8), which computes them as expert 0's."""
    from .config import get_token_alignment
    tensor_arg(name, "psum_num_tokens_per_expert", psum, (torch.int32,), 1, "[E]")
    require(psum.shape[0] > 0, name, "psum_num_tokens_per_expert", "must hold at least one expert")
    alignment = get_token_alignment()
    pos = torch.empty(rows, dtype=torch.int32, device=psum.device)
    ops().get_mapping_from_psum(psum.contiguous(), pos, alignment)          # written into pos
    if backward:                  # the rows past the layout (normally none) are computed, not zero-filled
        end = (psum[-1:].to(torch.int64) + alignment - 1) // alignment * alignment
        pos = torch.where(torch.arange(rows, device=psum.device) >= end, 0, pos).to(torch.int32)
    return pos


def _count_clamps(clamped_count, counts, moe, rows, hidden):
    """TileKernels adds [#(a > c), #(b > c), #(b < -c), elements seen] into its int64[4] counter; the
    elements of the valid rows only with a psum layout."""
    if clamped_count is not None:
        clamped_count[:3] += counts
        pos = moe.get("pos_to_expert")
        clamped_count[3] += rows * hidden if pos is None else (pos >= 0).sum() * hidden


def swiglu_forward_and_per_token_cast(x, fmt: str, num_per_channels: int, psum_num_tokens_per_expert=None,
                                      topk_weights=None, routed_scaling_factor=None,
                                      use_tma_aligned_col_major_sf=False, round_sf=False, use_packed_ue8m0=False,
                                      clamp_value=None, clamped_count=None):
    name = "quant.swiglu_forward_and_per_token_cast"
    moe = _swiglu_moe(name, x, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor, clamp_value,
                      clamped_count)
    q, sf, counts = ops().swiglu_forward_and_per_token_cast(
        x, fmt=fmt, group=num_per_channels, scale=scale_format(name, round_sf, use_packed_ue8m0), **moe,
        **amax_floor(as_format(fmt)))
    _count_clamps(clamped_count, counts, moe, x.shape[0], x.shape[-1] // 2)
    return q, laid_out(sf, use_tma_aligned_col_major_sf)


def swiglu_forward(x, fmt: str, psum_num_tokens_per_expert=None, topk_weights=None, routed_scaling_factor=None,
                   clamp_value=None, clamped_count=None):
    require(fmt in ("fp32", "bf16"), "quant.swiglu_forward", "fmt", f"must be 'fp32' or 'bf16', got {fmt!r}")
    moe = _swiglu_moe("quant.swiglu_forward", x, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor,
                      clamp_value, clamped_count)
    out, counts = ops().swiglu_forward(x, fmt=fmt, **moe)
    _count_clamps(clamped_count, counts, moe, x.shape[0], x.shape[-1] // 2)
    return out


def _backward_result(x_grad, cast, weight_grad, act_out, weighted, recompute):
    """TileKernels' order: x_grad, then (x_grad_fp8, x_grad_sf) when cast, weight_grad with weights,
    act_out when recomputed."""
    result = [x_grad]
    if cast is not None:
        result.append(cast)
    if weighted:
        result.append(weight_grad)
    if recompute:
        result.append(act_out)
    return tuple(result)


def swiglu_backward_and_per_token_cast(x, act_x_grad, fmt: str, num_per_channels: int,
                                       psum_num_tokens_per_expert=None, topk_weights=None, routed_scaling_factor=None,
                                       use_tma_aligned_col_major_sf=False, round_sf=False, use_packed_ue8m0=False,
                                       clamp_value=None, do_recompute=False):
    """With fmt 'e4m3', x is (q, sf) and x_grad is also cast per token; with 'bf16' or 'fp32', x is a plain
    tensor and the call is swiglu_backward's, as 2.1.0 takes both paths through this function."""
    name = "quant.swiglu_backward_and_per_token_cast"
    require(fmt in ("e4m3", "bf16", "fp32"), name, "fmt", f"must be 'e4m3', 'bf16' or 'fp32', got {fmt!r}")
    if fmt != "e4m3":
        return swiglu_backward(x, act_x_grad, fmt, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor,
                               clamp_value, do_recompute)
    q, sf = quant_tensor(name, x)
    moe = _swiglu_moe(name, q, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor, clamp_value, None,
                      backward=True)
    # 2.1.0 rounds da's factor 1 + a * (1 - s) once, as the first release does (da_fma): read off its bits on
    # an H200 (benchmarks/swiglu_backward_v2_bits.py, docs/numerics.md)
    x_grad, fp8, fp8_sf, weight_grad, act_out = ops().swiglu_backward_and_per_token_cast(
        q, sf, act_x_grad, num_per_channels, scale=scale_format(name, round_sf, use_packed_ue8m0),
        sf_layout="col" if use_tma_aligned_col_major_sf else "row", recompute=do_recompute, da_fma=True, **moe,
        **amax_floor("e4m3"))
    return _backward_result(x_grad, (fp8, fp8_sf), weight_grad, act_out, topk_weights is not None, do_recompute)


def swiglu_backward(x, act_x_grad, fmt: str, psum_num_tokens_per_expert=None, topk_weights=None,
                    routed_scaling_factor=None, clamp_value=None, do_recompute=False):
    """x_grad (and act_out) in `fmt`, 'bf16' or 'fp32', from bf16 or fp32 inputs alike: each element is the
    float32 value rounded once into fmt. The kernel computes in float32 and stores in x's dtype, so where fmt
    differs, bf16 inputs are first widened to float32 (exact, the same values) and a float32 result is rounded
    to bf16 by tkgen's elementwise_cast (to nearest even, overflowing to inf, as a bf16 store rounds). da's
    factor 1 + a * (1 - s) is rounded once (da_fma), as 2.1.0 rounds it."""
    name = "quant.swiglu_backward"
    require(fmt in ("bf16", "fp32"), name, "fmt", f"must be 'bf16' or 'fp32', got {fmt!r}")
    tensor_arg(name, "x", x, (torch.float32, torch.bfloat16))
    tensor_arg(name, "act_x_grad", act_x_grad, (x.dtype,))
    moe = _swiglu_moe(name, x, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor, clamp_value, None,
                      backward=True)
    if fmt == "fp32" and x.dtype == torch.bfloat16:
        x, act_x_grad = x.float(), act_x_grad.float()
    x_grad, weight_grad, _, act_out = ops().swiglu_backward(x, act_x_grad, recompute=bool(do_recompute), da_fma=True,
                                                            **moe)
    if out_format(x_grad.dtype) != fmt:         # fp32 results of fp32 inputs, wanted in bf16
        x_grad = cast(x_grad.contiguous(), fmt)
        if do_recompute:
            act_out = cast(act_out.contiguous(), fmt)
    return _backward_result(x_grad, None, weight_grad, act_out, topk_weights is not None, do_recompute)


def norm_forward(x, weight, eps: float, residual=None, out_scale: float = 1.0, out=None, residual_out=None,
                 with_rstd=False):
    """(out, rstd or None, norm_input): norm_input is x, or the residual sum x + residual."""
    y, rstd, res = ops().rmsnorm_forward(x, weight, residual, eps, out_scale)
    norm_input = x if residual is None else into(residual_out, res)
    return into(out, y), (rstd if with_rstd else None), norm_input


def norm_forward_and_per_token_cast(x, weight, eps: float, fmt: str, num_per_channels: int, residual=None,
                                    out_scale: float = 1.0, use_tma_aligned_col_major_sf=False, round_sf=False,
                                    use_packed_ue8m0=False, with_out_bf16=False, out=None, out_bf16=None,
                                    residual_out=None, mega_moe_sf=None, mega_moe_block_m: int = 0, with_rstd=False):
    """((q, sf), out_bf16 or None, rstd or None, norm_input). out_bf16 (with with_out_bf16, or a given
    out_bf16 tensor, which is written and returned) is the normalized row y rounded to bf16: the values q
    was cast from, for bf16 x, and bf16(y) of the float32 y for float32 x."""
    name = "quant.norm_forward_and_per_token_cast"
    mega = _mega_moe_buffer(name, x, mega_moe_sf, mega_moe_block_m, round_sf)
    scale = scale_format(name, round_sf, use_packed_ue8m0)
    with_bf16 = bool(with_out_bf16) or out_bf16 is not None
    if out_bf16 is not None:
        tensor_arg(name, "out_bf16", out_bf16, (torch.bfloat16,))
        require(tuple(out_bf16.shape) == tuple(x.shape), name, "out_bf16",
                f"must have x's shape {tuple(x.shape)}, got {tuple(out_bf16.shape)}")
    q, sf, rstd, res, y = ops().rmsnorm_forward_and_per_token_cast(x, weight, residual, eps, out_scale, fmt,
                                                                   num_per_channels, scale, with_bf16,
                                                                   **amax_floor(as_format(fmt)))
    if mega is not None and x.shape[0]:
        _store_mega_moe_sf(sf, scale, mega_moe_block_m, *mega)
    norm_input = x if residual is None else into(residual_out, res)
    return (into(out, (q, laid_out(sf, use_tma_aligned_col_major_sf))), into(out_bf16, y) if with_bf16 else None,
            (rstd if with_rstd else None), norm_input)


def _mega_moe_buffer(name, x, buf, block_m, round_sf):
    """Check TileKernels 2.1.0's mega_moe_sf and mega_moe_block_m (given together): an int32 [T, H / 128]
    M-major view (stride(0) == 1) of DeepGEMM's mega-MoE scale buffer, whose stride(1) (its rows) holds
    every chunk of block_m tokens padded to align(block_m, 128) rows. Returns (the buffer's words as one flat
    view of its storage, its rows), or None without it."""
    if buf is None and not block_m:
        return None
    require(buf is not None, name, "mega_moe_sf", "must be given with mega_moe_block_m")
    int_arg(name, "mega_moe_block_m", block_m, 1, 1 << 20)
    tensor_arg(name, "mega_moe_sf", buf, (torch.int32,), 2, "[T, H / 128]")
    require(x.dim() == 2, name, "x", f"must be 2-D [T, H] with mega_moe_sf, got shape {tuple(x.shape)}")
    require(round_sf, name, "round_sf", "must be True with mega_moe_sf (its scales are UE8M0 exponents)")
    tokens, hidden = x.shape
    require(hidden % 128 == 0, name, "x", f"must have a hidden size that is a multiple of 128 with mega_moe_sf, "
                                          f"got {hidden}")
    require(buf.device == x.device, name, "mega_moe_sf", f"must be on x's device {x.device}, got {buf.device}")
    words = hidden // 128
    require(tuple(buf.shape) == (tokens, words), name, "mega_moe_sf",
            f"must have shape {(tokens, words)} [T, H / 128], got {tuple(buf.shape)}")
    rows = buf.stride(1)
    padded = -(-tokens // block_m) * (-(-block_m // 128) * 128)
    require(buf.stride(0) == 1 and rows >= padded, name, "mega_moe_sf",
            f"must be M-major with a row stride (stride(1)) of at least ceil(T / mega_moe_block_m) * "
            f"align(mega_moe_block_m, 128) = {padded}, got strides {buf.stride()}")
    size = words * rows
    require(size < 2 ** 31 and buf.storage_offset() + size <= buf.untyped_storage().nbytes() // 4, name,
            "mega_moe_sf", f"must lie in a buffer of H / 128 columns of stride(1) = {rows} rows each "
                           f"(below 2^31 words)")
    return buf.as_strided((size,), (1,)), rows


def _store_mega_moe_sf(sf, scale, block_m, flat, rows):
    """The packed UE8M0 words of the row-major scales `sf` (format `scale`) stored into the mega-MoE buffer
    `flat` at the rows of DeepGEMM's layout: two generated kernels, the positions, then the stores."""
    tokens = sf.shape[0]
    pos = torch.empty((tokens, flat.shape[0] // rows), dtype=torch.int32, device=sf.device)
    ops().mega_moe_sf_positions(pos, rows, block_m=block_m)
    ops().mega_moe_sf_store(sf, pos, flat, scale=scale)


def norm_backward(out_grad, x, weight, rstd, residual_out_grad=None, out_scale: float = 1.0, weight_grad=None):
    """(x_grad, weight_grad or None); a given `weight_grad` is accumulated into."""
    tensor_arg("quant.norm_backward", "out_grad", out_grad, (torch.bfloat16, torch.float32), 2, "[T, H]")
    x_grad, _, wg = ops().rmsnorm_backward(out_grad, x, rstd, weight, residual_out_grad, out_scale)
    if weight is None:
        return x_grad, None
    wg = wg.to(weight.dtype) if weight_grad is None else weight_grad.add_(wg.to(weight_grad.dtype))
    return x_grad, wg




UNPACK_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)


def unpack_from_e2m1fn_x2(x, out_dtype=torch.float32):
    """FP4 codes two per byte (int8 or uint8, any leading dims) -> out_dtype, the last dim doubled, element 2i
    from the low nibble: float32, bfloat16, float16, float8_e4m3fn or float8_e5m2 (each holds every e2m1
    value exactly) decoded by the kernel into that dtype; any other torch dtype (float64, integers, ...)
    from the kernel's float32 values by torch's `.to(out_dtype)`, as 2.1.0 converts its float32 values."""
    name = "quant.unpack_from_e2m1fn_x2"
    tensor_arg(name, "x", x, (torch.int8, torch.uint8))
    require(isinstance(out_dtype, torch.dtype), name, "out_dtype", f"must be a torch.dtype, got {out_dtype!r}",
            TypeError)
    shape = (*x.shape[:-1], 2 * x.shape[-1])
    if x.numel() == 0:
        return torch.empty(shape, dtype=out_dtype, device=x.device)
    kernel_dtype = out_dtype if out_dtype in UNPACK_DTYPES else torch.float32
    y = ops().unpack_from_e2m1fn_x2(x.reshape(-1, x.shape[-1]).view(torch.int8), kernel_dtype).view(shape)
    return y if kernel_dtype == out_dtype else y.to(out_dtype)


CAST_CHUNK = 1 << 30      # elements per launch: tkgen's kernels index in int32


STOCHASTIC_PAIRS = {("fp32", "bf16"), ("fp32", "e4m3"), ("bf16", "e4m3")}


def cast(x, dtype, stochastic_rounding=False):
    """x.to(dtype) for fp32, bf16 and e4m3 (saturating), any shape, rounding to nearest even; with
    stochastic_rounding, fp32 -> bf16, fp32 -> e4m3 or bf16 -> e4m3 with numel % 4 == 0, rounded by the
    hash of each quad of elements and its global index (tkgen's stochastic_cast). More than CAST_CHUNK
    elements go in several launches, each writing its slice of the result (the quad index counting on)."""
    tensor_arg("quant.cast", "x", x, (torch.float32, torch.bfloat16, torch.float8_e4m3fn))
    require(x.is_contiguous(), "quant.cast", "x", "must be contiguous; call .contiguous()")
    flat, dtype = x.reshape(-1), as_format(dtype)
    if stochastic_rounding:
        src = {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(x.dtype)
        require((src, dtype) in STOCHASTIC_PAIRS, "quant.cast", "dtype",
                f"with stochastic_rounding casts one of {sorted(STOCHASTIC_PAIRS)}, got {(src, dtype)}")
        require(flat.numel() % 4 == 0, "quant.cast", "x", f"with stochastic_rounding needs numel % 4 == 0, got "
                                                          f"{flat.numel()}")
        name, flat = "stochastic_cast", flat.view(-1, 4)
    else:
        name = "elementwise_cast"
    chunk = CAST_CHUNK // flat[0].numel() if flat.numel() else 1      # rows of a launch (elements or quads)
    if flat.shape[0] <= chunk:
        return getattr(ops(), name)(flat, dtype).view(x.shape)
    y = torch.empty(flat.shape, dtype=_TORCH[dtype], device=x.device)
    for i in range(0, flat.shape[0], chunk):
        params = {"dtype": dtype, **({"first_quad": i} if stochastic_rounding else {})}
        written_into(name, (y[i:i + chunk],), {"x": flat[i:i + chunk]}, params)
    return y.view(x.shape)


def _weight_sf_layouts(groups, n: int, k: int, nb: int, kb: int, transpose_sf1: bool):
    """(shape, strides) of sf0_out and sf1_out: MN-major packed UE8M0 words, a group dim first if grouped."""
    w0, w1 = -(-kb // 4), -(-nb // 4)
    lead0, lead1 = ((groups, w0 * n), (groups, w1 * k)) if groups is not None else (None, None)
    sf0 = ((n, w0), (1, n))
    sf1 = ((w1, k), (k, 1)) if transpose_sf1 else ((k, w1), (1, k))
    return tuple(((lead[0], *shape), (lead[1], *strides)) if lead else (shape, strides)
                 for lead, (shape, strides) in ((lead0, sf0), (lead1, sf1)))


def batched_transpose_weight_sf(sf_list, block_size: int, transpose_sf1s, outs):
    """TileKernels 2.1.0's DeepGEMM weight scales: per weight, from float32 power-of-two block scales `sf`
    [n / B, k / B] or [G, n / B, k / B] (B = block_size, 32 or 128; n and k multiples of 128), the pair
    (sf0_out, sf1_out) of packed UE8M0 int32 tensors: sf0_out [(G,) n, ceil(k_b / 4)] with strides
    ((n * ceil(k_b / 4),) 1, n), word g of row r holding the exponent byte of sf[r // B, 4g + j] in byte j;
    sf1_out the same for the transpose, [(G,) k, ceil(n_b / 4)] with strides ((k * ceil(n_b / 4),) 1, k),
    or [(G,) ceil(n_b / 4), k] with strides ((k * ceil(n_b / 4),) k, 1) with `transpose_sf1s[i]`; bytes past
    the last block are 0. `outs[i]` None allocates the pair, else the given pair (of those shapes and
    strides) is rewritten in place and returned. A scale that is not a positive power of two raises
    ValueError (TileKernels device-asserts zero sign and mantissa bits; tkgen also refuses 0 and inf,
    whose bytes 0 and 255 are no UE8M0 scale of a block).

    Built from the generated op `transpose_weight_sf` (specs/quant/transpose_weight_sf.yaml), one launch
    per weight, and per group of a grouped weight, where TileKernels runs every weight in one launch."""
    name = "quant.batched_transpose_weight_sf"
    require(isinstance(sf_list, (list, tuple)), name, "sf_list", "must be a list of tensors", TypeError)
    require(isinstance(transpose_sf1s, (list, tuple)), name, "transpose_sf1s", "must be a list of bools", TypeError)
    require(isinstance(outs, (list, tuple)), name, "outs", "must be a list of None or (sf0_out, sf1_out)", TypeError)
    require(len(transpose_sf1s) == len(sf_list), name, "transpose_sf1s",
            f"must have one flag per weight ({len(sf_list)}), got {len(transpose_sf1s)}")
    require(len(outs) == len(sf_list), name, "outs",
            f"must have one entry per weight ({len(sf_list)}), got {len(outs)}")
    require(block_size in (32, 128), name, "block_size", f"must be 32 or 128, got {block_size!r}")
    pairs = []
    for i, (sf, transpose_sf1, out) in enumerate(zip(sf_list, transpose_sf1s, outs)):
        arg = f"sf_list[{i}]"
        tensor_arg(name, arg, sf, (torch.float32,), None, "[n / B, k / B] or [G, n / B, k / B]")
        require(sf.dim() in (2, 3), name, arg, f"must have rank 2 or 3, got shape {tuple(sf.shape)}")
        require(sf.is_contiguous(), name, arg, "must be contiguous")
        groups = sf.shape[0] if sf.dim() == 3 else None
        nb, kb = sf.shape[-2:]
        n, k = nb * block_size, kb * block_size
        require(groups is None or groups > 0, name, arg, "must have at least one group")
        require(nb > 0 and kb > 0 and n % 128 == 0 and k % 128 == 0, name, arg,
                f"must describe a weight whose n and k are positive multiples of 128, got n = {n}, k = {k}")
        bits, biased = sf.view(torch.int32), (sf.view(torch.int32) >> 23) & 0xFF
        require(not bool((((bits & 0x807FFFFF) != 0) | (biased == 0) | (biased == 0xFF)).any()), name, arg,
                "must hold positive powers of two (sign and mantissa bits 0, a normal exponent)")
        require(isinstance(transpose_sf1, bool), name, f"transpose_sf1s[{i}]", "must be a bool", TypeError)
        layouts = _weight_sf_layouts(groups, n, k, nb, kb, transpose_sf1)
        if out is None:
            out = tuple(torch.empty_strided(shape, strides, dtype=torch.int32, device=sf.device)
                        for shape, strides in layouts)
        else:
            require(isinstance(out, (tuple, list)) and len(out) == 2, name, f"outs[{i}]",
                    "must be None or a (sf0_out, sf1_out) pair", TypeError)
            for t, what, (shape, strides) in zip(out, ("sf0_out", "sf1_out"), layouts):
                tensor_arg(name, f"outs[{i}] ({what})", t, (torch.int32,))
                require(t.device == sf.device, name, f"outs[{i}] ({what})", f"must be on {sf.device}")
                require(tuple(t.shape) == shape and t.stride() == strides, name, f"outs[{i}] ({what})",
                        f"must have shape {shape} and strides {strides}, got {tuple(t.shape)} and {t.stride()}")
            out = tuple(out)
        for g in range(groups or 1):
            sf0, sf1 = (o[g] for o in out) if groups is not None else out
            written_into("transpose_weight_sf", (sf0, sf1.t() if transpose_sf1 else sf1),
                         {"sf": sf[g] if groups is not None else sf}, {"block": block_size})
        pairs.append(out)
    return pairs

__all__ = ["per_channel_cast", "unpack_from_e2m1fn_x2", "per_token_cast", "per_token_cast_with_precomputed_sf",
           "per_token_cast_with_sf_only", "per_block_cast", "per_block_cast_with_precomputed_sf",
           "per_block_cast_with_sf_only", "cast_back", "per_token_cast_back", "cast", "per_token_cast_and_cast_back",
           "swiglu_backward_and_per_token_cast", "swiglu_backward", "swiglu_forward_and_per_token_cast",
           "swiglu_forward", "per_block_cast_lossless", "batched_transpose_weight_sf",
           "norm_forward_and_per_token_cast", "norm_forward", "norm_backward"]
