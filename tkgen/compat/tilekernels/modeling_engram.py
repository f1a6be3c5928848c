"""`tile_kernels.modeling.engram` of TileKernels 2.1.0: the gate composite over a packed kv, on tkgen's
kernels (the first release's forward and backward, tkgen/nn/engram.py)."""
import torch

from ...nn import engram as _v1
from .._common import require, tensor_arg
from .engram import split_kv


class EngramGateFn(torch.autograd.Function):
    """TileKernels 2.1.0's composite over a packed kv [*, (hc + 1) * D] and an optional image_token_mask
    [*] (bool): fused_weight and the gate forward; backward: the gate backward (grad_kv in kv's shape), then
    the weight gradients accumulated into `weight.main_grad` (float32) where a weight has one (its gradient
    is then None), else into fresh float32 zeros that are returned."""

    @staticmethod
    def forward(ctx, hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask=None):
        hc, d = hidden_states.shape[-2:]
        ctx.shapes = hidden_states.shape, kv.shape
        k, v = split_kv(kv.reshape(-1, hc + 1, d), hc)
        mask = None if image_token_mask is None else _v1.image_mask(image_token_mask.reshape(-1))
        out = _v1.gate_forward(ctx, hidden_states.reshape(-1, hc, d), k, v, weight_hidden, weight_embed,
                               clamp_value, eps, mask)
        return out.reshape(hidden_states.shape)

    @staticmethod
    def backward(ctx, grad_out):
        grad_x, grad_k, grad_v, gwh, gwe = _v1.gate_backward(ctx, grad_out)
        shape, kv_shape = ctx.shapes
        grad_kv = torch.cat([grad_k, grad_v[:, None]], dim=1).reshape(kv_shape)
        return grad_x.reshape(shape), grad_kv, gwh, gwe, None, None, None


def engram_gate(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask=None):
    """EngramGateFn.apply: x + sigmoid(signed sqrt(<RMSNorm(x) * wh, RMSNorm(k) * we> / sqrt(D))) * v over
    hidden_states [*, hc, D], with k and v packed in kv [*, (hc + 1) * D]; image tokens pass x through. The
    argument order is the first release's with (k, v) replaced by kv and the mask last, as 2.1.0's gate
    forward and backward have them."""
    name = "modeling.engram.engram_gate"
    tensor_arg(name, "hidden_states", hidden_states, (torch.bfloat16,), None, "[*, hc, D]", min_rank=2)
    hc, d = hidden_states.shape[-2:]
    tensor_arg(name, "kv", kv, (torch.bfloat16,))
    require(kv.shape[:-1] == hidden_states.shape[:-2] and kv.shape[-1] == (hc + 1) * d, name, "kv",
            f"must be [*, (hc + 1) * D] = {(*hidden_states.shape[:-2], (hc + 1) * d)}, got {tuple(kv.shape)}")
    return EngramGateFn.apply(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask)


__all__ = ["engram_gate", "EngramGateFn"]
