"""`tile_kernels.engram` of TileKernels 2.1.0 on tkgen's kernels: the first release's operators with 2.1.0's
changes (the gate forward and backward over a packed `kv` with an optional `image_token_mask`, the forward
in place, the hash with the mask) and the four Sinkhorn kernels."""
import torch

from .._common import into, ops, require, tensor_arg, written_into
from ...nn import engram as _v1

RELEASE = "2.1.0"

fused_weight = _v1.fused_weight
grad_w_reduce = _v1.grad_w_reduce


def engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask=None):
    """As the first release's; with image_token_mask [T] (bool or integers), image tokens get -1 in every
    column."""
    return ops().engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets,
                             image_token_mask=_v1.image_mask(image_token_mask))


def split_kv(kv, hc):
    """k [T, hc, D] and v [T, D] of a packed kv [T, hc + 1, D], as views (the kernels take their strides)."""
    tensor_arg("engram.split_kv", "kv", kv, (torch.bfloat16, torch.float32), 3, f"[T, {hc + 1}, D]")
    require(kv.shape[1] == hc + 1, "engram.split_kv", "kv", f"must be [T, {hc + 1}, D], got {tuple(kv.shape)}")
    return kv[:, :hc], kv[:, hc]


def engram_gate_fwd(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward=True,
                    image_token_mask=None, inplace=False):
    """(output, dot, gate_score, rstd_x, rstd_k) over kv [T, hc + 1, D] (k = kv[:, :hc], v = kv[:, hc],
    read in place); the last four are None without save_for_backward. An image token (image_token_mask
    True) gets its hidden_states row unchanged. With inplace (not with save_for_backward, as TileKernels
    asserts), the output is hidden_states, overwritten; tkgen's kernel writes a fresh output that is then
    copied over it (the same bits, one more pass over the tensor)."""
    require(not (inplace and save_for_backward), "engram.engram_gate_fwd", "inplace",
            "is incompatible with save_for_backward=True")
    tensor_arg("engram.engram_gate_fwd", "hidden_states", hidden_states, (torch.bfloat16,), 3, "[T, hc, D]")
    k, v = split_kv(kv, hidden_states.shape[1])
    outs = _v1.gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward,
                        _v1.image_mask(image_token_mask))
    if not inplace:
        return outs
    return (hidden_states.copy_(outs[0]), *outs[1:])


def engram_gate_bwd(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                    image_token_mask=None):
    """(grad_x, grad_kv, grad_w_partial): grad_kv [T, hc + 1, D] holds grad_k in its first hc rows and grad_v
    in the last; an image token has grad_x = grad_out, grad_kv = 0 and no share of the weight gradient.
    grad_w_partial is [1, hc, D], already reduced in block order (as the first release's: TileKernels gives
    one partial per SM, [S, hc, D]); its sum over the first dim is the gradient of weight_fused."""
    tensor_arg("engram.engram_gate_bwd", "hidden_states", hidden_states, (torch.bfloat16,), 3, "[T, hc, D]")
    hc = hidden_states.shape[1]
    k, v = split_kv(kv, hc)
    grad_x, grad_k, grad_v, grad_w = _v1.gate_bwd(grad_out, hidden_states, k, v, weight_fused, dot, gate_score,
                                                  rstd_x, rstd_k, clamp_value, _v1.image_mask(image_token_mask))
    return grad_x, torch.cat([grad_k, grad_v[:, None]], dim=1), grad_w


def engram_sinkhorn_momentum_update(grad, momentum_buffer, beta1, nesterov=True):
    """The momentum buffer updated in place (fma in float32, stored in its dtype); returns the float32
    Sinkhorn input (the Nesterov look-ahead from the unrounded update, or the update itself). tkgen takes
    1 - beta1 in float32 (exact for beta1 in [0.5, 1]), where TileKernels rounds the float64 1 - beta1."""
    return ops().engram_sinkhorn_momentum_update(grad, momentum_buffer, beta1=beta1, nesterov=nesterov)


def engram_sinkhorn_step(matrix, row_scale, col_scale, eps):
    """(row_norm [R], col_sumsq_partial [1, D]); row_scale [R] is updated in place (times 1 / (norm + eps)).
    TileKernels returns one column partial per worker, [3 * S, D]; tkgen's kernel adds its blocks' shares
    itself in block order (the same bits on every run), so the partial is [1, D]: engram_sinkhorn_step_reduce
    or `.sum(0)` gives the column sums of squares, as with TileKernels' partials."""
    row_norm, col_sumsq = ops().engram_sinkhorn_step(matrix, row_scale, col_scale, eps=eps)
    return row_norm, col_sumsq.unsqueeze(0)


def engram_sinkhorn_step_reduce(col_sumsq_partial, col_sumsq):
    """Writes the sum of the partials [P, D] over P, in order, into col_sumsq [D]; returns None."""
    ops().engram_sinkhorn_step_reduce(col_sumsq_partial, col_sumsq)


def engram_sinkhorn_finalize(matrix, row_scale, col_scale, eps, alpha, out=None):
    """The row-normalized iterate scaled by alpha, [R, D] float32; stored into `out` when given (the kernel
    writes straight into a contiguous one), which is then returned."""
    params = {"eps": eps, "alpha": alpha}
    if out is not None and out.is_contiguous():
        return written_into("engram_sinkhorn_finalize", (out,), {"matrix": matrix, "row_scale": row_scale,
                                                                  "col_scale": col_scale}, params)
    return into(out, ops().engram_sinkhorn_finalize(matrix, row_scale, col_scale, **params))


__all__ = ["fused_weight", "grad_w_reduce", "engram_hash", "engram_gate_fwd", "engram_gate_bwd",
           "engram_sinkhorn_momentum_update", "engram_sinkhorn_step", "engram_sinkhorn_step_reduce",
           "engram_sinkhorn_finalize"]
