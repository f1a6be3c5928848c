"""Modules around the differentiable functions of `tkgen.nn.functional` (generated forward and backward
kernels, through torch.library ops with registered autograd formulas)."""
import torch

from . import functional


class SwiGLU(torch.nn.Module):
    """y = silu(a) * b for x = [a, b] split in halves along the last dim; an optional per-row weight."""

    def forward(self, x, weights=None):
        return functional.swiglu(x, weights=weights, fmt="fp32" if x.dtype == torch.float32 else "bf16")


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dim with a learnable weight (in the dtype the inputs will have)."""

    def __init__(self, hidden, eps=1e-6, dtype=torch.bfloat16, device=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=dtype, device=device))

    def forward(self, x, residual=None):
        return functional.rms_norm(x, self.weight, residual=residual, eps=self.eps)


__all__ = ["functional", "SwiGLU", "RMSNorm"]
