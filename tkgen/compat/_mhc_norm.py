"""The generated pre-norm projection (`mhc_pre_norm_fn`) for the mHC composites, which take the residual as
(..., m, D) where the op takes tokens flattened to (T, m * D); forward only (the op has no backward yet)."""
from __future__ import annotations

import torch

from ._common import ops


def fits(residual, fn, norm_weight) -> bool:
    """Whether the op takes these tensors: its dtypes and its dims' bounds (m * D a multiple of 8 in
    [8, 131072], 1 to 64 rows of fn), on one device."""
    k = residual.shape[-2] * residual.shape[-1] if residual.dim() >= 2 else -1
    return (residual.dtype == torch.bfloat16 and fn.dtype == torch.float32 and fn.dim() == 2 and fn.shape[1] == k
            and 8 <= k <= 131072 and k % 8 == 0 and 1 <= fn.shape[0] <= 64 and residual.device == fn.device
            and (norm_weight is None or (norm_weight.dtype == torch.float32 and tuple(norm_weight.shape) == (k,))))


def pre_norm_fn(residual, fn, norm_weight, eps):
    """mixes (..., rows) float32 of residual (..., m, D) bf16 and fn (rows, m * D) (see the op)."""
    k = residual.shape[-2] * residual.shape[-1]
    mixes = ops().mhc_pre_norm_fn(residual.reshape(-1, k).contiguous(), fn.contiguous(),
                                  None if norm_weight is None else norm_weight.contiguous(), eps=float(eps))
    return mixes.reshape(*residual.shape[:-2], fn.shape[0])
