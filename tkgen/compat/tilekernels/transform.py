"""`tile_kernels.transform` of TileKernels 2.1.0 on tkgen's kernels: `apply_rotary`, in place."""
import torch

from .._common import ops
from ...runtime.ops import strides_aligned

RELEASE = "2.1.0"


def apply_rotary(query, cos_sin_cache, key=None, positions=None, interleaved=False, conjugate=False,
                 seqlen_offset=0):
    """Rotates `query` and, if given, `key` in place (one launch each), as TileKernels 2.1.0 does: each
    token's position is seqlen_offset + positions[b, t] (or + t without positions), and the row of
    cos_sin_cache [L_ro, R] (cos in its first R/2 columns, sin in its last R/2) at that position rotates
    every head's pairs with fused multiply-adds (tkgen.ops.apply_rotary). query and key are [T, heads, R]
    or [B, L, heads, R], bf16 or float32, any view whose last dim is contiguous (a head split, a slice
    q[..., -R:], whose other columns are left as they were); positions (int32 or int64) are [T] or [B, L],
    and may be broadcast over the batch (a batch stride of 0). Returns None."""
    if not isinstance(query, torch.Tensor) or query.dim() not in (3, 4):
        raise ValueError("apply_rotary: query must be a [T, heads, R] or [B, L, heads, R] tensor")
    if key is not None and (not isinstance(key, torch.Tensor) or key.dim() != query.dim()
                            or key.dtype != query.dtype or key.shape[:-2] != query.shape[:-2]):
        raise ValueError("apply_rotary: key must have the rank, dtype and tokens of query "
                         f"(query {tuple(query.shape)} {query.dtype})")
    if isinstance(seqlen_offset, bool) or not isinstance(seqlen_offset, int):
        raise ValueError(f"apply_rotary: seqlen_offset must be an integer, got {seqlen_offset!r}")
    tokens = tuple(query.shape[:-2])
    if positions is not None and (not isinstance(positions, torch.Tensor) or tuple(positions.shape) != tokens):
        raise ValueError(f"apply_rotary: positions must have shape {tokens} (the tokens of query)")
    pos = _positions(positions, tokens, seqlen_offset, query.device)
    cache = cos_sin_cache if not isinstance(cos_sin_cache, torch.Tensor) else cos_sin_cache.contiguous()
    for x in (query, key):
        if x is not None:
            _rotate(x, pos, cache, interleaved, conjugate)


def _positions(positions, tokens, offset, device):
    """The cache row of each token, [*tokens] (int32 where the rows fit, else int64): a small tensor made
    on the host's side of the op; the kernel takes whatever int32 or int64 rows it is given."""
    if positions is None:
        length = tokens[-1]
        dtype = torch.int32 if offset + length < 2 ** 31 and offset >= -(2 ** 31) else torch.int64
        rows = torch.arange(offset, offset + length, dtype=dtype, device=device)
        return rows.expand(tokens)
    if positions.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"apply_rotary: positions must be int32 or int64, got {positions.dtype}")
    return positions + offset if offset else positions


def _rotate(x, pos, cache, interleaved, conjugate):
    if not (x.is_contiguous() or strides_aligned(x)):      # a view off the kernel's 16-byte loads: via a copy
        tmp = x.contiguous()
        _rotate(tmp, pos, cache, interleaved, conjugate)
        x.copy_(tmp)
        return
    if x.dim() == 3:
        ops().apply_rotary(x, pos.contiguous(), cache, interleaved=interleaved, conjugate=conjugate)
        return
    b, length, heads, r = x.shape
    try:
        flat = x.view(b * length, heads, r)        # batch and tokens merge (the usual layout): one launch
    except RuntimeError:
        flat = None
    if flat is not None:
        ops().apply_rotary(flat, pos.reshape(-1).contiguous(), cache, interleaved=interleaved, conjugate=conjugate)
        return
    for i in range(b):                             # a batch stride that is no multiple of the token stride
        ops().apply_rotary(x[i], pos[i].contiguous(), cache, interleaved=interleaved, conjugate=conjugate)


__all__ = ["apply_rotary"]
