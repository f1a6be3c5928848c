"""Engram as TileKernels has it (`engram`, `modeling.engram`; 2.1.0 kept some unchanged), on tkgen's kernels."""
import torch

from .. import ops
from ..runtime.arguments import require, tensor_arg
from ..runtime.ops import strided_as_is


def engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets):
    """[L, T, (N - 1) * M] int32 embedding indices of the n-gram hashes (floor modulo: TileKernels' CUDA `%`
    truncates, which differs only for a negative hash, where it gives an index below the offset)."""
    return ops.engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets)


def fused_weight(weight_hidden, weight_embed):
    """[hc, D] float32 product of the two bf16 weights, bit for bit."""
    return ops.fused_weight(weight_hidden, weight_embed)


def unit_last(t):
    """t itself where the gate kernels can read it through its strides (the last dim contiguous, the others
    multiples of the kernels' 16-byte loads: tkgen/runtime/ops.py: strided_as_is), else a copy."""
    return t if strided_as_is(t) else t.contiguous()


def image_mask(image_token_mask):
    """TileKernels' bool (or integer) image-token mask as the int32 mask the kernels take, or None."""
    return None if image_token_mask is None else image_token_mask.to(torch.int32).contiguous()


def gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward, mask=None):
    """The gate forward of either release: k and v go to the kernel as views (strided), mask an int32 mask."""
    outs = ops.engram_gate_fwd(hidden_states, unit_last(k), unit_last(v), weight_fused, image_token_mask=mask,
                                 eps=eps, clamp_value=clamp_value, save_for_backward=save_for_backward)
    return tuple(outs) if save_for_backward else (outs[0], None, None, None, None)


def gate_bwd(grad_out, hidden_states, k, v, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value, mask=None):
    """(grad_x, grad_k, grad_v, grad_w_partial [1, hc, D]) of either release."""
    grad_x, grad_k, grad_v, grad_w = ops.engram_gate_bwd(grad_out, hidden_states, unit_last(k), unit_last(v),
                                                           weight_fused, dot, gate_score, rstd_x, rstd_k,
                                                           image_token_mask=mask, clamp_value=clamp_value)
    return grad_x, grad_k, grad_v, grad_w.unsqueeze(0)


def engram_gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward=True):
    """(output, dot, gate_score, rstd_x, rstd_k); the last four are None without save_for_backward (the
    kernel then stores output only, with the same bits). k and v may be strided views (last dim
    contiguous): the kernel reads them through their strides."""
    return gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward)


def engram_gate_bwd(grad_out, hidden_states, k, v, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value):
    """(grad_x, grad_k, grad_v, grad_w_partial). TileKernels returns one partial sum of weight_fused's
    gradient per persistent block, [S, hc, D]; tkgen's kernel reduces them itself in block order (the same
    bits on every run), so grad_w_partial is [1, hc, D]: its sum over the first dim, by grad_w_reduce or
    by `.sum(0)`, is the gradient, as with TileKernels' partials."""
    return gate_bwd(grad_out, hidden_states, k, v, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value)


def grad_w_reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed):
    """Adds R * weight_embed into grad_weight_hidden and R * weight_hidden into grad_weight_embed (float32
    buffers, in place; R the sum of the partials over their first dim); returns None."""
    for arg, buf in (("grad_weight_hidden", grad_weight_hidden), ("grad_weight_embed", grad_weight_embed)):
        # TileKernels' kernel types both buffers float32 and refuses others
        require(isinstance(buf, torch.Tensor) and buf.dtype == torch.float32, "engram.grad_w_reduce", arg,
                f"must be a float32 tensor (accumulated into in place), got "
                f"{buf.dtype if isinstance(buf, torch.Tensor) else type(buf).__name__}", TypeError)
    ops.grad_w_reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed)


def weight_grads(wh, we, partial):
    """The two weight gradients from grad_w_partial: added into `weight.main_grad` (float32) where a weight
    has one (its gradient is then None), else into fresh float32 zeros that are returned."""
    grads = []
    for weight in (wh, we):
        main = getattr(weight, "main_grad", None)
        grads.append(main if main is not None else torch.zeros(weight.shape, dtype=torch.float32,
                                                               device=weight.device))
    grad_w_reduce(partial, wh, we, grads[0], grads[1])
    return tuple(None if getattr(t, "main_grad", None) is not None else g for t, g in zip((wh, we), grads))


def gate_forward(ctx, x, k, v, weight_hidden, weight_embed, clamp_value, eps, mask=None):
    """The composite's forward over rows, for either release's autograd.Function: x [N, hc, D], k [N, hc, D]
    (may be a strided view), v [N, D], mask int32 [N] or None; saves what gate_backward needs."""
    w = fused_weight(weight_hidden, weight_embed)
    out, dot, gate, rstd_x, rstd_k = gate_fwd(x, k, v, w, eps, clamp_value, True, mask)
    ctx.save_for_backward(x, k, v, weight_hidden, weight_embed, w, dot, gate, rstd_x, rstd_k, mask)
    ctx.clamp_value = clamp_value
    return out


def gate_backward(ctx, grad_out):
    """(grad_x, grad_k, grad_v, grad_weight_hidden, grad_weight_embed) over the rows of gate_forward."""
    x, k, v, wh, we, w, dot, gate, rstd_x, rstd_k, mask = ctx.saved_tensors
    grad_x, grad_k, grad_v, partial = gate_bwd(grad_out.reshape(x.shape).contiguous(), x, k, v, w, dot, gate,
                                               rstd_x, rstd_k, ctx.clamp_value, mask)
    return (grad_x, grad_k, grad_v, *weight_grads(wh, we, partial))


class EngramGateFn(torch.autograd.Function):
    """TileKernels' first-release composite: fused_weight and the gate forward; backward: the gate backward,
    then the weight gradients accumulated into `weight.main_grad` (float32) where a weight has one (its
    gradient is then None), else into fresh float32 zeros that are returned."""

    @staticmethod
    def forward(ctx, hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps):
        hc, d = hidden_states.shape[-2:]
        ctx.shapes = hidden_states.shape, k.shape, v.shape
        out = gate_forward(ctx, hidden_states.reshape(-1, hc, d), k.reshape(-1, hc, d), v.reshape(-1, d),
                           weight_hidden, weight_embed, clamp_value, eps)
        return out.reshape(hidden_states.shape)

    @staticmethod
    def backward(ctx, grad_out):
        grad_x, grad_k, grad_v, gwh, gwe = gate_backward(ctx, grad_out)
        shape, kshape, vshape = ctx.shapes
        return grad_x.reshape(shape), grad_k.reshape(kshape), grad_v.reshape(vshape), gwh, gwe, None, None


def engram_gate(hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps):
    """x + sigmoid(signed sqrt(<RMSNorm(x) * wh, RMSNorm(k) * we> / sqrt(D))) * v over [*, hc, D], with
    the gradients of every input from the generated backward kernels."""
    tensor_arg("engram_gate", "hidden_states", hidden_states, (torch.bfloat16,), None, "[*, hc, D]", min_rank=2)
    return EngramGateFn.apply(hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps)


__all__ = ["engram_hash", "fused_weight", "engram_gate_fwd", "engram_gate_bwd", "grad_w_reduce"]
