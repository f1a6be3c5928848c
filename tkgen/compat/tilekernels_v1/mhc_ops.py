"""`tile_kernels.modeling.mhc.ops` of TileKernels' first release, on tkgen's kernels: each function
differentiable through the generated backward. Leading dims (n0, n1, ...) are flattened into tokens; mixes
keep TileKernels' shapes ((..., m, 1) for pre and post).

The residual's gradient follows the release's accumulation protocol (operators-v1.md 7, `fuse_grad_acc`):
mhc_post's backward hangs its residual gradient (bf16, the residual's dtype) on the residual's storage as
`grad_from_mhc_post` and returns it; the backwards of mhc_pre_apply_mix and of mhc_pre_norm_fn (with
fuse_grad_acc) that find that buffer add their residual gradient into it, in place and in its dtype, and
return None, mhc_pre_norm_fn deleting the attribute after. A caller may hang its own buffer (TileKernels'
tests hang zeros_like(residual)) and read the gradient there. tkgen.nn.functional does none of this: there
autograd sums the consumers' gradients (docs/api-conventions.md)."""
from __future__ import annotations

import torch

from .._common import into, ops, tensor_arg
# the release's recompute (operators-v1.md 7.9: bit-equal to the single-layer kernels in sequence) and its
# kernel entry points of mhc_post, which the release's docs name without their arguments: the same functions
# as 2.1.0's, with the arguments 2.1.0 documents (x, residual, post_layer_mix, comb_res_mix[, out | d_o])
from ..tilekernels.mhc import mhc_multilayer_recompute, mhc_post_bwd, mhc_post_fwd  # noqa: F401

_ATTR = "grad_from_mhc_post"


class _ResidualGrad(torch.autograd.Function):
    """The identity on the residual, whose backward routes the residual gradient one consumer computed
    (tkgen's generated backward, in the residual's dtype) by the protocol above; `role` names the consumer:
    "post" publishes the gradient as the buffer, "norm_fn" adds into a buffer it finds and deletes the
    attribute. Without a buffer the gradient is returned to autograd (where TileKernels' mhc_pre_norm_fn
    fails on the missing attribute)."""

    @staticmethod
    def forward(ctx, residual, role):
        ctx.storage, ctx.role = residual.untyped_storage(), role
        return residual.view_as(residual)

    @staticmethod
    def backward(ctx, grad):
        if grad is None:
            return None, None
        if ctx.role == "post":
            # the tensor autograd receives is the buffer: later consumers' in-place additions reach it, since
            # autograd hands the residual's producer its gradient only after every consumer's backward ran
            grad = grad.contiguous()
            setattr(ctx.storage, _ATTR, grad)
            return grad, None
        buf = getattr(ctx.storage, _ATTR, None)
        if buf is None:
            return grad, None
        buf.view(grad.shape).add_(grad)       # computed in float32, rounded once to the buffer's dtype
        delattr(ctx.storage, _ATTR)           # "norm_fn": the last consumer of the block's residual
        return None, None


def _routed(residual, role):
    """`residual` through _ResidualGrad where its gradient will be taken."""
    if torch.is_grad_enabled() and residual.requires_grad:
        return _ResidualGrad.apply(residual, role)
    return residual


def _tokens(t, trailing):
    return t.reshape(-1, *t.shape[t.dim() - trailing:])


def expand_to_mhc(hidden, mhc_mult: int, out=None):
    """(..., D) bf16 -> (..., mhc_mult, D), every stream a copy of hidden."""
    tensor_arg("modeling.mhc.ops.expand_to_mhc", "hidden", hidden, (torch.bfloat16,), None, "(..., D)", min_rank=1)
    res = ops().expand_to_mhc(_tokens(hidden, 1), mhc_mult)
    return into(out, res.reshape(*hidden.shape[:-1], mhc_mult, hidden.shape[-1]))


def mhc_pre_split_mixes(input_mixes, mhc_scale, mhc_base, mhc_mult: int, mhc_post_mult_value: float,
                        mhc_pre_eps: float):
    """input_mixes (n0, n1, m * (m + 2)) float32 -> pre (n0, n1, m, 1), post (n0, n1, m, 1), comb (n0, n1, m, m)."""
    tensor_arg("modeling.mhc.ops.mhc_pre_split_mixes", "input_mixes", input_mixes, (torch.float32,), 3,
               "(n0, n1, m * (m + 2))")
    n0, n1, _ = input_mixes.shape
    m = mhc_mult
    pre, post, comb = ops().mhc_pre_split_mixes(_tokens(input_mixes, 1), mhc_scale, mhc_base, m,
                                                float(mhc_post_mult_value), float(mhc_pre_eps))
    return pre.reshape(n0, n1, m, 1), post.reshape(n0, n1, m, 1), comb.reshape(n0, n1, m, m)


def sinkhorn_normalize(x, repeat: int = 10, eps: float = 1e-6):
    """(..., n, n) float32: softmax over rows + eps, then 2 * repeat - 1 column and row normalizations."""
    tensor_arg("modeling.mhc.ops.sinkhorn_normalize", "x", x, (torch.float32,), None, "(..., n, n)", min_rank=2)
    n = x.shape[-1]
    return ops().sinkhorn_normalize(_tokens(x, 2), repeat, float(eps)).reshape(x.shape[:-2] + (n, n))


def mhc_pre_apply_mix(x, mix, out=None):
    """x (..., m, D) bf16, mix (..., m, 1) float32 -> (..., D) bf16: the streams weighted and added in order."""
    tensor_arg("modeling.mhc.ops.mhc_pre_apply_mix", "x", x, (torch.bfloat16,), None, "(..., m, D)", min_rank=2)
    m, d = x.shape[-2:]
    if torch.is_grad_enabled() and (x.requires_grad or mix.requires_grad):
        res = _PreApplyMix.apply(_tokens(x, 2), mix.reshape(-1, m), x.untyped_storage())
    else:
        res = ops().mhc_pre_apply_mix(_tokens(x, 2), mix.reshape(-1, m))
    return into(out, res.reshape(*x.shape[:-2], d))


class _PreApplyMix(torch.autograd.Function):
    """mhc_pre_apply_mix whose backward adds x's gradient into a bf16 `grad_from_mhc_post` buffer as the
    release's kernel does, bf16(mix * g + buffer), one rounding (the generated backward's x_grad_acc); into a
    buffer of another dtype it adds the bf16 gradient. Without a buffer the gradient is returned."""

    @staticmethod
    def forward(ctx, x, mix, storage):
        ctx.save_for_backward(x, mix)
        ctx.storage = storage
        return ops().mhc_pre_apply_mix(x, mix)

    @staticmethod
    def backward(ctx, grad):
        from tkgen import registry
        x, mix = ctx.saved_tensors
        buf = getattr(ctx.storage, _ATTR, None)
        acc = buf.view(x.shape) if buf is not None and buf.dtype == x.dtype else None
        x_grad, mix_grad = registry.op_package("mhc_pre_apply_mix_backward").invoke(grad.contiguous(), x, mix, acc)
        if buf is None:
            return x_grad, mix_grad, None
        if acc is not None:
            acc.copy_(x_grad)
        else:
            buf.view(x.shape).add_(x_grad)
        return None, mix_grad, None


def mhc_post(x, residual, post_layer_mix, comb_res_mix, out=None):
    """The next residual (..., m, D) bf16: post[o] * x + sum over i of comb[i, o] * residual[i]."""
    m = residual.shape[-2]
    res = ops().mhc_post(_tokens(x, 1), _tokens(_routed(residual, "post"), 2), post_layer_mix.reshape(-1, m),
                         comb_res_mix.reshape(-1, m, m))
    return into(out, res.reshape(residual.shape))


def mhc_head_compute_mix(input_mix, mhc_scale, mhc_base, mhc_pre_eps: float):
    """input_mix (n0, n1, m) float32, mhc_scale (1,), mhc_base (m,) -> sigmoid(x * scale + base) + pre_eps."""
    tensor_arg("modeling.mhc.ops.mhc_head_compute_mix", "input_mix", input_mix, (torch.float32,), 3, "(n0, n1, m)")
    res = ops().mhc_head_compute_mix(_tokens(input_mix, 1), mhc_scale.reshape(1), mhc_base, float(mhc_pre_eps))
    return res.reshape(input_mix.shape)


def mhc_pre_norm_fn(residual, mhc_fn, mhc_norm_weight, mhc_norm_eps: float, fuse_grad_acc: bool = True,
                    n_splits: int = 16):
    """residual (..., m, D) bf16, mhc_fn (m * (m + 2), m * D) float32, mhc_norm_weight (m * D,) float32 or None
    -> mixes (..., m * (m + 2)) float32: (r @ F^T) * rsqrt(mean(r^2) + eps) per token, r the token's residual
    flattened, F = fn * norm_weight rounded to TF32 as TileKernels rounds it; a TF32 tile matmul on CUDA, an
    ordered float32 loop on the CPU; differentiable through the generated backward. `n_splits` has no effect
    (TileKernels forces it to 1 too). With `fuse_grad_acc` the residual's gradient is added into the
    `grad_from_mhc_post` buffer on its storage when there is one (the attribute then deleted, None returned
    for the residual); without, or with no buffer, it is returned. fn's gradient is returned rather than
    added into a `main_grad`."""
    import tkgen.nn.functional as F
    if fuse_grad_acc:
        residual = _routed(residual, "norm_fn")
    return F.mhc_norm_fn(residual, mhc_fn, mhc_norm_weight, mhc_norm_eps)


RELEASE = "1.0"


def mhc_pre_big_fuse(residual, fn, mhc_scale, mhc_base, rms_eps: float, mhc_pre_eps: float,
                     mhc_sinkhorn_eps: float, mhc_post_mult_value: float, sinkhorn_repeat: int, n_splits: int = 16):
    """The inference pre-block: residual (..., m, D) bf16, fn (m * (m + 2), m * D), mhc_scale (3,), mhc_base
    (m * (m + 2),) float32 -> (post_mix (..., m, 1), comb_mix (..., m, m) float32, layer_input (..., D) bf16).
    The release's contract is bit-equality with the composite path (operators-v1.md 7.8): mhc_pre_norm_fn
    without a norm weight, mhc_pre_split_mixes, sinkhorn_normalize and mhc_pre_apply_mix, which is what
    this calls, without autograd. `n_splits` has no effect (the release forces it to 1)."""
    name = "modeling.mhc.ops.mhc_pre_big_fuse"
    tensor_arg(name, "residual", residual, (torch.bfloat16,), None, "(..., m, D)", min_rank=2)
    m = residual.shape[-2]
    lead = residual.shape[:-2]
    with torch.no_grad():
        mixes = mhc_pre_norm_fn(residual, fn, None, rms_eps, fuse_grad_acc=False, n_splits=n_splits)
        pre, post, comb = mhc_pre_split_mixes(mixes.reshape(1, -1, m * (m + 2)), mhc_scale, mhc_base, m,
                                              mhc_post_mult_value, mhc_pre_eps)
        comb = sinkhorn_normalize(comb, sinkhorn_repeat, mhc_sinkhorn_eps)
        layer_input = mhc_pre_apply_mix(residual, pre.reshape(*lead, m, 1))
    return post.reshape(*lead, m, 1), comb.reshape(*lead, m, m), layer_input


__all__ = ["expand_to_mhc", "mhc_head_compute_mix", "mhc_multilayer_recompute", "mhc_pre_norm_fn", "mhc_post",
           "mhc_post_bwd", "mhc_post_fwd", "mhc_pre_apply_mix", "mhc_pre_big_fuse", "mhc_pre_split_mixes",
           "sinkhorn_normalize"]
