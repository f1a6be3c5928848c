"""The primitive operations that generated PyTorch references are printed in terms of.

Unsigned 32-bit values are int64 tensors holding [0, 2^32); float32 constants are 0-d float32 tensors so
that every operation runs in float32, as the kernels do (a Python scalar would not: `448.0 / t` is
computed as `t.reciprocal() * 448.0`). Generated references run under `with torch.device(...)`, so these
constants are made on the inputs' device.
"""
import torch

__all__ = ["torch", "_f32", "_t", "_bits", "_from_bits", "_wrap_i32", "_absmax", "_exponent_byte",
           "_pack_words", "_codes_as", "_pad_dim", "_rows_valid", "_exp", "_log", "_rsqrt", "_same"]


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
    return torch.maximum(x, -x).amax(dim=dim)


def _exponent_byte(sf: torch.Tensor) -> torch.Tensor:
    """The biased exponent of power-of-two float32 scales (UE8M0 bytes), as int64."""
    return (_bits(sf) >> 23) & 0xFF


def _pack_words(codes: torch.Tensor, per_word: int, bits: int, word: torch.dtype) -> torch.Tensor:
    """Pack `per_word` consecutive codes of the last dim into one little-endian word; the tail is zero."""
    n = codes.shape[-1]
    words = -(-n // per_word)
    padded = torch.zeros(*codes.shape[:-1], words * per_word, dtype=torch.int64, device=codes.device)
    padded[..., :n] = codes
    packed = torch.zeros(*codes.shape[:-1], words, dtype=torch.int64, device=codes.device)
    for j in range(per_word):
        packed |= padded[..., j::per_word] << (bits * j)
    return _wrap_i32(packed).to(word) if word == torch.int32 else packed.to(word)


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


def _rows_valid(blocks: int, rows: int, size: int) -> torch.Tensor:
    """(blocks, rows) booleans: whether row `r` of row block `b` is below the dynamic size."""
    return (torch.arange(blocks * rows) < size).reshape(blocks, rows)
# Library math, mirroring what the kernels of the inputs' device call. On the CPU, TileLang's C backend
# calls libm's expf/logf (within 0.502 ulp; float64 rounded to float32 agrees with it on >99.9% of inputs,
# torch's own float32 exp on ~99%) and prints rsqrt as 1.0f / sqrtf(x), two correctly rounded operations.
# On CUDA the kernels and torch call the same CUDA math library (expf, logf, rsqrtf).
def _exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x) if x.is_cuda else torch.exp(x.double()).float()


def _log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x) if x.is_cuda else torch.log(x.double()).float()


def _rsqrt(x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(x) if x.is_cuda else _f32(1.0) / torch.sqrt(x)


def _same(x):
    return x
