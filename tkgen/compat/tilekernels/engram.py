"""`tile_kernels.engram` of TileKernels 2.1.0 on tkgen's kernels: the operators its first release had, unchanged,
and the Sinkhorn momentum update. The gate forward and backward with the packed `kv` and `image_token_mask`,
and the other three Sinkhorn kernels, are not built yet (they raise NotImplementedError naming themselves)."""
import torch

from .._common import missing, ops
from .. import _engram as _v1

RELEASE = "2.1.0"

fused_weight = _v1.fused_weight
grad_w_reduce = _v1.grad_w_reduce


def engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask=None):
    """As the first release's; with image_token_mask [T] (bool or integers), image tokens get -1 in every
    column."""
    mask = None if image_token_mask is None else image_token_mask.to(torch.int32).contiguous()
    return ops().engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask=mask)


def engram_sinkhorn_momentum_update(grad, momentum_buffer, beta1, nesterov=True):
    """The momentum buffer updated in place (fma in float32, stored in its dtype); returns the float32
    Sinkhorn input (the Nesterov look-ahead from the unrounded update, or the update itself). tkgen takes
    1 - beta1 in float32 (exact for beta1 in [0.5, 1]), where TileKernels rounds the float64 1 - beta1."""
    return ops().engram_sinkhorn_momentum_update(grad, momentum_buffer, beta1=beta1, nesterov=nesterov)


_MISSING = ["engram_gate_bwd", "engram_gate_fwd", "engram_sinkhorn_finalize", "engram_sinkhorn_step",
            "engram_sinkhorn_step_reduce"]
for _name in _MISSING:
    globals()[_name] = missing(f"engram.{_name}", RELEASE)

__all__ = ["fused_weight", "grad_w_reduce", "engram_hash", "engram_sinkhorn_momentum_update", *_MISSING]
