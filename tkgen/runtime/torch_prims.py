"""The primitive operations that generated PyTorch references are printed in terms of.

Unsigned 32-bit values are int64 tensors holding [0, 2^32); float32 constants are 0-d float32 tensors so
that every operation runs in float32, as the kernels do (a Python scalar would not: `448.0 / t` is
computed as `t.reciprocal() * 448.0`). Generated references run under `with torch.device(...)`, so these
constants are made on the inputs' device.
"""
import torch

from . import libm

__all__ = ["torch", "_f32", "_t", "_bits", "_from_bits", "_wrap_i32", "_absmax", "_nanmax", "_nanmin", "_exponent_byte",
           "_pack_codes", "_unpack_codes", "_codes_as", "_codes_of", "_col_major", "_pad_dim", "_rows_valid",
           "_kept", "_gather_at", "_add_at", "_count", "_exp", "_log", "_rsqrt", "_same"]


def _f32(value: float) -> torch.Tensor:
    """A float32 constant as a 0-d tensor on the default device (references run under `torch.device`)."""
    return torch.tensor(value, dtype=torch.float32)


def _t(x):
    """Python ints (u32/i32 constants) as int64 tensors, so torch.maximum and friends accept them."""
    return x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.int64)


def _bits(x: torch.Tensor) -> torch.Tensor:
    """float32 -> its bit pattern as a u32 value."""
    return x.to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _wrap_i32(u) -> torch.Tensor:
    """Any integer tensor -> int64 holding the value wrapped to signed 32 bits."""
    u = _t(u) & 0xFFFFFFFF
    return u - ((u >> 31) << 32)


def _from_bits(u) -> torch.Tensor:
    """A u32 bit pattern -> the float32 it encodes."""
    return _wrap_i32(u).to(torch.int32).view(torch.float32)


def _absmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """max |x| over `dim`, skipping NaN (0 where every element is NaN), like the kernels' reductions."""
    return torch.where(torch.isnan(x), 0.0, torch.maximum(x, -x)).amax(dim=dim)


def _nanmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """max over `dim`, skipping NaN (-inf where every element is NaN)."""
    return torch.where(torch.isnan(x), -torch.inf, x).amax(dim=dim) if x.is_floating_point() else x.amax(dim=dim)


def _nanmin(x: torch.Tensor, dim: int) -> torch.Tensor:
    """min over `dim`, skipping NaN (+inf where every element is NaN)."""
    return torch.where(torch.isnan(x), torch.inf, x).amin(dim=dim) if x.is_floating_point() else x.amin(dim=dim)


def _exponent_byte(sf: torch.Tensor) -> torch.Tensor:
    """The biased exponent of power-of-two float32 scales (UE8M0 bytes), as int64."""
    return (_bits(sf) >> 23) & 0xFF


def _packing(key):
    from tkgen.formats import Packing
    return Packing(*key)


_WORD = {"int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32}


def _assemble(pieces, parts, shape, device):
    """OR of shifted, masked pieces of `parts` (int64 tensors): one word of codes, or one code of words."""
    out = torch.zeros(shape, dtype=torch.int64, device=device)
    for i, r, bits, sh in pieces:
        out |= ((parts[..., i] >> r) & ((1 << bits) - 1)) << sh
    return out


def _pack_codes(codes: torch.Tensor, key: tuple, container: torch.dtype) -> torch.Tensor:
    """Pack codes (int64, along the last dim) into words as `key` = Packing(...).key() describes, then view
    the words as `container`. A last packet that is not full is padded with zero codes."""
    pk = _packing(key)
    n = codes.shape[-1]
    packets = -(-n // pk.codes)
    padded = torch.zeros(*codes.shape[:-1], packets * pk.codes, dtype=torch.int64, device=codes.device)
    padded[..., :n] = codes
    padded = padded.reshape(*codes.shape[:-1], packets, pk.codes)
    words = [_assemble(pk.word_pieces(k), padded, padded.shape[:-1], codes.device) for k in range(pk.words)]
    w = torch.stack(words, -1).reshape(*codes.shape[:-1], packets * pk.words)
    return _codes_as(w, _WORD[pk.word], _WORD[pk.word]).view(container)


def _unpack_codes(packed: torch.Tensor, key: tuple) -> torch.Tensor:
    """The inverse of _pack_codes: codes (int64, u32 values) along the last dim, a whole number of packets."""
    pk = _packing(key)
    w = _codes_of(packed.contiguous().view(_WORD[pk.word]))
    w = w.reshape(*w.shape[:-1], w.shape[-1] // pk.words, pk.words)
    codes = [_assemble(pk.code_pieces(j), w, w.shape[:-1], w.device) for j in range(pk.codes)]
    return torch.stack(codes, -1).reshape(*w.shape[:-2], w.shape[-2] * pk.codes)


def _codes_of(x: torch.Tensor) -> torch.Tensor:
    """An integer (or 8/16-bit float) container's bits as unsigned values in int64."""
    width = x.element_size() * 8
    as_int = x.view({8: torch.int8, 16: torch.int16, 32: torch.int32}[width]).to(torch.int64)
    return as_int & ((1 << width) - 1)


def _codes_as(codes: torch.Tensor, storage: torch.dtype, container: torch.dtype) -> torch.Tensor:
    """Integer codes (int64) -> the format's torch container, bit for bit."""
    width = torch.empty((), dtype=storage).element_size() * 8
    signed = codes - ((codes >> (width - 1)) & 1) * (1 << width)      # into the signed range of `width`
    as_int = signed.to({8: torch.int8, 16: torch.int16, 32: torch.int32}[width])
    return as_int.view(container)


def _pad_dim(x: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """`x` with dim `dim` zero-padded at the end to `size` (rows of a partial last row block)."""
    if x.shape[dim] == size:
        return x
    pad = list(x.shape)
    pad[dim] = size - x.shape[dim]
    return torch.cat([x, torch.zeros(pad, dtype=x.dtype, device=x.device)], dim=dim)


def _rows_valid(blocks: int, rows: int, size: int, device=None) -> torch.Tensor:
    """(blocks, rows) booleans: whether row `r` of row block `b` is below the dynamic size."""
    return (torch.arange(blocks * rows, device=device) < size).reshape(blocks, rows)


def _kept(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """`x` where the row is kept (keep_rows), 0 elsewhere: the kernel neither reads nor writes such rows."""
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype))


def _gather_at(flat: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """flat[pos] where 0 <= pos < numel, else 0 (an input addressed `at:` positions)."""
    ok = (pos >= 0) & (pos < flat.numel())
    if not flat.numel():
        return torch.zeros(pos.shape, dtype=flat.dtype, device=pos.device)
    return torch.where(ok, flat[torch.where(ok, pos, 0)], torch.zeros((), dtype=flat.dtype))


def _add_at(values: torch.Tensor, pos: torch.Tensor, shape, keep=None) -> torch.Tensor:
    """A zero tensor of `shape` with each value added at its flat position, where 0 <= pos < numel (and the
    row is kept): an output addressed `at:` positions. Positions may repeat."""
    out = torch.zeros(shape, dtype=values.dtype, device=values.device).reshape(-1)
    ok = (pos >= 0) & (pos < out.numel())
    if keep is not None:
        ok &= keep
    values, pos = torch.broadcast_tensors(values, pos)
    return out.index_add_(0, pos[ok], values[ok]).reshape(shape)


def _count(cond: torch.Tensor, shape) -> torch.Tensor:
    """How many elements of `shape` a condition holds at (broadcast over the axes it does not vary over)."""
    return torch.broadcast_to(cond, shape).sum()


# Library math: the functions the kernels of the inputs' device call. On the CPU, TileLang's C backend calls
# libm's expf/logf, which no other implementation matches on every input, so the reference calls them too
# (runtime/libm.py), and it prints rsqrt as 1.0f / sqrtf(x), two correctly rounded operations. On CUDA the
# kernels and torch call the same CUDA math library (expf, logf, rsqrtf).
def _exp(x: torch.Tensor) -> torch.Tensor:
    """The exp the kernels of the inputs' device call: CUDA's expf (through torch) or the CPU's libm expf."""
    return torch.exp(x) if x.is_cuda else libm.expf(x)


def _log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x) if x.is_cuda else libm.logf(x)


def _rsqrt(x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(x) if x.is_cuda else _f32(1.0) / torch.sqrt(x)


def _same(x):
    return x


def _col_major(x: torch.Tensor, pad: int) -> torch.Tensor:
    """A [rows, cols] tensor in the column-major layout: stored as [cols, rows padded to `pad`], returned as
    the [rows, cols] view with strides (1, padded rows). The padding is zero here; kernels leave it alone."""
    from .layouts import col_major_empty
    out = col_major_empty(x.shape, pad, x.dtype, x.device)
    out.copy_(x)
    return out
