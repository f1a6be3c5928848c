"""Engram as TileKernels has it (`engram`, `modeling.engram`; 2.1.0 kept some unchanged), on tkgen's kernels."""
import torch

from ._common import need, ops


def engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets):
    """[L, T, (N - 1) * M] int32 embedding indices of the n-gram hashes (floor modulo: TileKernels' CUDA `%`
    truncates, which differs only for a negative hash, where it gives an index below the offset)."""
    return ops().engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets)


def fused_weight(weight_hidden, weight_embed):
    """[hc, D] float32 product of the two bf16 weights, bit for bit."""
    return ops().fused_weight(weight_hidden, weight_embed)


def engram_gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward=True):
    """(output, dot, gate_score, rstd_x, rstd_k); the last four are None without save_for_backward (the
    kernel then stores output only, with the same bits). k and v may be strided (copied contiguous)."""
    outs = ops().engram_gate_fwd(hidden_states, k.contiguous(), v.contiguous(), weight_fused, eps=eps,
                                 clamp_value=clamp_value, save_for_backward=save_for_backward)
    return tuple(outs) if save_for_backward else (outs[0], None, None, None, None)


def engram_gate_bwd(grad_out, hidden_states, k, v, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value):
    """(grad_x, grad_k, grad_v, grad_w_partial). TileKernels returns one partial sum of weight_fused's
    gradient per persistent block, [S, hc, D]; tkgen's kernel reduces them itself in block order (the same
    bits on every run), so grad_w_partial is [1, hc, D]: its sum over the first dim, by grad_w_reduce or
    by `.sum(0)`, is the gradient, as with TileKernels' partials."""
    grad_x, grad_k, grad_v, grad_w = ops().engram_gate_bwd(grad_out, hidden_states, k.contiguous(), v.contiguous(),
                                                           weight_fused, dot, gate_score, rstd_x, rstd_k,
                                                           clamp_value=clamp_value)
    return grad_x, grad_k, grad_v, grad_w.unsqueeze(0)


def grad_w_reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed):
    """Adds R * weight_embed into grad_weight_hidden and R * weight_hidden into grad_weight_embed (float32
    buffers, in place; R the sum of the partials over their first dim); returns None."""
    need(grad_weight_hidden.dtype == torch.float32 and grad_weight_embed.dtype == torch.float32,
         "engram.grad_w_reduce", "into buffers that are not float32")
    ops().grad_w_reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed)


class EngramGateFn(torch.autograd.Function):
    """TileKernels' composite: fused_weight and the gate forward; backward: the gate backward, then the
    weight gradients accumulated into `weight.main_grad` (float32) where a weight has one (its gradient is
    then None), else into fresh float32 zeros that are returned."""

    @staticmethod
    def forward(ctx, hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps):
        shape, d = hidden_states.shape, hidden_states.shape[-1]
        hc = hidden_states.shape[-2]
        x, kk, vv = hidden_states.reshape(-1, hc, d), k.reshape(-1, hc, d), v.reshape(-1, d)
        w = fused_weight(weight_hidden, weight_embed)
        out, dot, gate, rstd_x, rstd_k = engram_gate_fwd(x, kk, vv, w, eps, clamp_value, save_for_backward=True)
        ctx.save_for_backward(x, kk, vv, weight_hidden, weight_embed, w, dot, gate, rstd_x, rstd_k)
        ctx.clamp_value, ctx.shapes = clamp_value, (shape, k.shape, v.shape)
        return out.reshape(shape)

    @staticmethod
    def backward(ctx, grad_out):
        x, k, v, wh, we, w, dot, gate, rstd_x, rstd_k = ctx.saved_tensors
        go = grad_out.reshape(x.shape).contiguous()
        grad_x, grad_k, grad_v, partial = engram_gate_bwd(go, x, k, v, w, dot, gate, rstd_x, rstd_k, ctx.clamp_value)
        grads = []
        for weight in (wh, we):
            main = getattr(weight, "main_grad", None)
            grads.append(main if main is not None else torch.zeros(weight.shape, dtype=torch.float32,
                                                                   device=weight.device))
        grad_w_reduce(partial, wh, we, grads[0], grads[1])
        gwh, gwe = (None if getattr(t, "main_grad", None) is not None else g for t, g in zip((wh, we), grads))
        shape, kshape, vshape = ctx.shapes
        return grad_x.reshape(shape), grad_k.reshape(kshape), grad_v.reshape(vshape), gwh, gwe, None, None


def engram_gate(hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps):
    """x + sigmoid(signed sqrt(<RMSNorm(x) * wh, RMSNorm(k) * we> / sqrt(D))) * v over [*, hc, D], with
    the gradients of every input from the generated backward kernels."""
    return EngramGateFn.apply(hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps)


__all__ = ["engram_hash", "fused_weight", "engram_gate_fwd", "engram_gate_bwd", "grad_w_reduce"]
