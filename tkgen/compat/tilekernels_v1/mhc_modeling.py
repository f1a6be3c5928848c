"""`tile_kernels.modeling.mhc` of TileKernels' first release: the composites, on tkgen.nn.functional.

TileKernels' pre-norm projection is a TF32 tensor-core GEMM (its weight rounded by adding 0x1000 to the bits).
These composites take it from `tkgen.nn.functional.mhc_norm_fn`: the generated `mhc_pre_norm_fn` (the
weight rounded as TileKernels rounds it, a TF32 `T.gemm` on CUDA) and its generated backward. As in
TileKernels, `mhc_pre` without gradients ignores `norm_weight` (TileKernels' inference fusion has none).
With gradients, both composites reach the residual through this release's mhc_pre_norm_fn (fuse_grad_acc on,
its default) and mhc_pre_apply_mix, so its gradient follows the `grad_from_mhc_post` protocol (mhc_ops)."""
from __future__ import annotations

import torch

from .mhc_ops import mhc_pre_apply_mix, mhc_pre_norm_fn


def _functional():
    import tkgen.nn.functional as F
    return F


def expand_from_embedding(x, mhc_mult: int = 4):
    return _functional().expand_from_embedding(x, mhc_mult)


def mhc_pre(residual, fn, scale, base, *, norm_weight=None, norm_eps=1e-6, mhc_mult=4, post_mult_value=1.0,
            pre_eps=1e-6, sinkhorn_eps=1e-6, sinkhorn_repeat=10, n_splits=16):
    """(layer_input (..., D) bf16, (post_mix (..., m, 1), comb_mix (..., m, m)))."""
    if torch.is_grad_enabled():
        F = _functional()
        lead = residual.shape[:-2]
        mixes = F._tokens(mhc_pre_norm_fn(residual, fn, norm_weight, norm_eps, n_splits=n_splits), 1)
        pre, post, comb = F._generated("mhc_split_mixes")(mixes, scale, base, mhc_mult, post_mult_value, pre_eps)
        comb = F._generated("sinkhorn")(comb, sinkhorn_repeat, sinkhorn_eps)
        layer_input = mhc_pre_apply_mix(residual, pre.reshape(*lead, mhc_mult, 1))
        return layer_input, (post.reshape(*lead, mhc_mult, 1), comb.reshape(*lead, mhc_mult, mhc_mult))
    norm_weight = None
    return _functional().mhc_pre(residual, fn, scale, base, norm_weight=norm_weight, norm_eps=norm_eps,
                                 mhc_mult=mhc_mult, post_mult_value=post_mult_value, pre_eps=pre_eps,
                                 sinkhorn_eps=sinkhorn_eps, sinkhorn_repeat=sinkhorn_repeat, n_splits=n_splits)


def mhc_head(residual, fn, scale, base, *, norm_weight=None, norm_eps=1e-6, mhc_mult=4, pre_eps=1e-6, n_splits=16):
    """layer_input (..., D) bf16."""
    if torch.is_grad_enabled():
        F = _functional()
        mixes = F._tokens(mhc_pre_norm_fn(residual, fn, norm_weight, norm_eps, n_splits=n_splits), 1)
        scale = torch.as_tensor(scale, dtype=torch.float32, device=mixes.device).reshape(1)
        mix = F._generated("mhc_head_mix")(mixes[:, :mhc_mult].contiguous(), scale, base, pre_eps)
        return mhc_pre_apply_mix(residual, mix.reshape(*residual.shape[:-2], mhc_mult, 1))
    return _functional().mhc_head(residual, fn, scale, base, norm_weight=norm_weight, norm_eps=norm_eps,
                                  mhc_mult=mhc_mult, pre_eps=pre_eps, n_splits=n_splits)


__all__ = ["expand_from_embedding", "mhc_head", "mhc_pre"]
