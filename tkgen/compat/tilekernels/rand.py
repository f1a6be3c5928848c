"""`tile_kernels.rand` of TileKernels 2.1.0: normal samples reproducible from one seed.

On CUDA (and here on the CPU as well) TileKernels' `randn` is `torch.randn` itself, so `set_seed(s)` then
`randn(...)` gives the bits of `torch.manual_seed(s)` then `torch.randn(...)`. Besides torch's generator,
`set_seed` sets a host counter that `reserve_seed` hands out: a kernel that draws its own numbers (2.1.0's
Ascend `randn`, one generator per block) reserves as many consecutive seeds as it has blocks, and takes
their mixed start."""
from __future__ import annotations

import torch

_MASK = 0xFFFFFFFF
_seed = torch.initial_seed()


def randn(*size, dtype=torch.float32, device=None, **kwargs):
    """Standard normal samples: `torch.randn(*size, dtype=dtype, device=device)`."""
    return torch.randn(*size, dtype=dtype, device=device, **kwargs)


def randn_like(x: torch.Tensor, dtype=None, device=None):
    """`randn` of x's shape, in x's dtype and on x's device unless given."""
    return randn(tuple(x.shape), dtype=dtype or x.dtype, device=device or x.device)


def set_seed(seed: int) -> None:
    """Seeds torch's generators (`torch.manual_seed`) and the counter `reserve_seed` takes from."""
    global _seed
    torch.manual_seed(seed)
    _seed = int(seed)


def mix(seed: int) -> int:
    """The seed counter's value made a 32-bit seed: plus 0x9E3779B9, then xor-shift-multiply rounds
    (^ >> 16, * 0x21F0AAAD, ^ >> 15, * 0x735A2D97, ^ >> 15), all modulo 2^32."""
    h = (seed + 0x9E3779B9) & _MASK
    h ^= h >> 16
    h = (h * 0x21F0AAAD) & _MASK
    h ^= h >> 15
    h = (h * 0x735A2D97) & _MASK
    return h ^ (h >> 15)


def reserve_seed(num: int) -> int:
    """`mix` of the counter, which then moves on by `num` (the seeds a call's blocks take)."""
    global _seed
    out = mix(_seed)
    _seed += num
    return out


__all__ = ["randn", "randn_like", "set_seed", "reserve_seed"]
