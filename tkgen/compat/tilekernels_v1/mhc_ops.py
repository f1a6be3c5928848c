"""`tile_kernels.modeling.mhc.ops` of TileKernels' first release, on tkgen's kernels: each function
differentiable through the generated backward. Leading dims (n0, n1, ...) are flattened into tokens; mixes
keep TileKernels' shapes ((..., m, 1) for pre and post). The gradient of the residual is summed by autograd
over its consumers (TileKernels instead has its consumers add into a buffer hung on the residual's storage
by mhc_post's backward: the same sum, rounded to bf16 once here rather than at each addition there)."""
from __future__ import annotations

import torch

from .._common import into, missing, ops, tensor_arg


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
    res = ops().mhc_pre_apply_mix(_tokens(x, 2), mix.reshape(-1, m))
    return into(out, res.reshape(*x.shape[:-2], d))


def mhc_post(x, residual, post_layer_mix, comb_res_mix, out=None):
    """The next residual (..., m, D) bf16: post[o] * x + sum over i of comb[i, o] * residual[i]."""
    m = residual.shape[-2]
    res = ops().mhc_post(_tokens(x, 1), _tokens(residual, 2), post_layer_mix.reshape(-1, m),
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
    (TileKernels forces it to 1 too), nor has `fuse_grad_acc`: autograd adds the residual's gradients of its
    consumers, and fn's gradient is returned rather than added into a `main_grad`."""
    import tkgen.nn.functional as F
    return F.mhc_norm_fn(residual, mhc_fn, mhc_norm_weight, mhc_norm_eps)


RELEASE = "1.0"
# the inference fusion built on the pre-norm GEMM, the multilayer recompute, and the kernel entry points of
# mhc_post (whose signatures the catalog does not give)
mhc_pre_big_fuse = missing("modeling.mhc.ops.mhc_pre_big_fuse", RELEASE)
mhc_multilayer_recompute = missing("modeling.mhc.ops.mhc_multilayer_recompute", RELEASE)
mhc_post_fwd = missing("modeling.mhc.ops.mhc_post_fwd", RELEASE)
mhc_post_bwd = missing("modeling.mhc.ops.mhc_post_bwd", RELEASE)

__all__ = ["expand_to_mhc", "mhc_head_compute_mix", "mhc_multilayer_recompute", "mhc_pre_norm_fn", "mhc_post",
           "mhc_post_bwd", "mhc_post_fwd", "mhc_pre_apply_mix", "mhc_pre_big_fuse", "mhc_pre_split_mixes",
           "sinkhorn_normalize"]
