"""`tile_kernels.engram` of TileKernels 2.1.0: the operators its first release had unchanged, on tkgen's kernels.
The gate forward and backward with the packed `kv` and `image_token_mask`, and the Sinkhorn kernels, are not
built yet (they raise NotImplementedError naming themselves)."""
from .._common import missing, need
from .. import _engram as _v1

RELEASE = "2.1.0"

fused_weight = _v1.fused_weight
grad_w_reduce = _v1.grad_w_reduce


def engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask=None):
    """As the first release's; an image_token_mask (image tokens hash to -1) is not built yet."""
    need(image_token_mask is None, "engram.engram_hash", "with image_token_mask")
    return _v1.engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets)


_MISSING = ["engram_gate_bwd", "engram_gate_fwd", "engram_sinkhorn_finalize", "engram_sinkhorn_momentum_update",
            "engram_sinkhorn_step", "engram_sinkhorn_step_reduce"]
for _name in _MISSING:
    globals()[_name] = missing(f"engram.{_name}", RELEASE)

__all__ = ["fused_weight", "grad_w_reduce", "engram_hash", *_MISSING]
