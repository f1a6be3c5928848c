"""The primitive operations that generated PyTorch references are printed in terms of.

Unsigned 32-bit values are int64 tensors holding [0, 2^32); float32 constants are 0-d float32 tensors so
that every operation runs in float32, as the kernels do (a Python scalar would not: `448.0 / t` is
computed as `t.reciprocal() * 448.0`). Generated references run under `with torch.device(...)`, so these
constants are made on the inputs' device.
"""
import torch

from . import libm
from .packing import Packet
from .schedule import tree_levels

__all__ = ["torch", "_f32", "_f64", "_t", "_bits", "_from_bits", "_wrap_i32", "_absmax", "_nanmax", "_nanmin", "_sum",
           "_matmul", "_codes_as", "_codes_of", "_exp", "_log", "_log1p", "_tanh", "_erf", "_sqrt", "_rsqrt", "_same", "_fma", "_trunc",
           "_ix", "_fit", "_view", "_store_view", "_gather", "_take", "_scatter", "_pack_codes",
           "_unpack_codes", "tree_levels"]


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


# packing along the last dim, in torch (inputs drawn by the strategies; an independent check of the
# kernels' packing)
def _packing(key):
    return Packet(*key)


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


# Library math: the functions the kernels of the inputs' device call. On the CPU, TileLang's C backend calls
# libm's expf/logf, which no other implementation matches on every input, so the reference calls them too
# (runtime/libm.py), and it prints rsqrt as 1.0f / sqrtf(x), two correctly rounded operations. On CUDA the
# kernels and torch call the same CUDA math library (expf, logf, rsqrtf).
def _exp(x: torch.Tensor) -> torch.Tensor:
    """The exp the kernels of the inputs' device call: CUDA's expf (through torch) or the CPU's libm expf."""
    return torch.exp(x) if x.is_cuda else libm.expf(x)


def _log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x) if x.is_cuda else libm.logf(x)


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """sqrtf, correctly rounded. torch's float32 sqrt on the CPU is not everywhere (torch 2.13 with AVX-512:
    sqrt(0.6931472) came out one unit low); the float64 root rounded to float32 is (a double has more than
    2 * 24 + 2 bits, so the second rounding is innocuous)."""
    return torch.sqrt(x) if x.is_cuda else torch.sqrt(x.to(torch.float64)).to(torch.float32)


def _rsqrt(x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(x) if x.is_cuda else _f32(1.0) / _sqrt(x)


def _same(x):
    return x


def _log1p(x: torch.Tensor) -> torch.Tensor:
    return torch.log1p(x) if x.is_cuda else libm.log1pf(x)


def _tanh(x: torch.Tensor) -> torch.Tensor:
    """tanhf: CUDA's through torch, the CPU's libm (what the C kernels call; torch's vectorised CPU tanh
    differs from it in the last bits)."""
    return torch.tanh(x) if x.is_cuda else libm.tanhf(x)


def _erf(x: torch.Tensor) -> torch.Tensor:
    return torch.erf(x) if x.is_cuda else libm.erff(x)


def _f64(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64)


def _sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.sum(dim=dim)


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [M, K] times b [N, K] transposed, [M, N] float32: for k = 0, 1, ... acc = acc + a[:, k] * b[:, k],
    from +0.0, each product and each sum rounded to float32 (the C kernels' loop, bit for bit)."""
    acc = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float32, device=a.device)
    for k in range(a.shape[1]):
        acc = acc + a[:, k, None] * b[None, :, k]
    return acc


def _trunc(x) -> torch.Tensor:
    """Toward zero, as int64 (C's float-to-integer conversion); integers as they are."""
    x = _t(x)
    return x.trunc().to(torch.int64) if x.is_floating_point() else x


def _fma(a, b, c) -> torch.Tensor:
    """The fma of the kernels of the inputs' device. CUDA: a * b + c with one rounding (float32): the
    product is exact in float64, and the sum is rounded to odd there (53 bits, more than 2 * 24 + 2), so
    that rounding it to float32 rounds once, correctly. CPU (TileLang's C backend has no fused
    multiply-add): the exact product plus c rounded to float64, then to float32."""
    a, b, c = (_t(v).to(torch.float64) for v in (a, b, c))
    if not (a * b).is_cuda:
        return (a * b + c).to(torch.float32)
    return _fma_rn(a, b, c)


def _fma_rn(a, b, c) -> torch.Tensor:
    """a * b + c rounded once to float32 (see _fma)."""
    a, b, c = (_t(v).to(torch.float64) for v in (a, b, c))
    p = a * b
    s = p + c
    # TwoSum: the exact error of s; where it is not zero and s is even, step s toward it (round to odd)
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    bits = s.view(torch.int64)
    odd = (bits & 1) == 1
    step = torch.where((err > 0) == (s > 0), 1, -1)
    fix = (err != 0) & ~odd & torch.isfinite(s)
    s = torch.where(fix, (bits + step).view(torch.float64), s)
    return s.to(torch.float32)


# -- whole-tensor statements of generated references ------------------------------------------------------
def _ix(n: int, pos: int, ndim: int, device) -> torch.Tensor:
    """The indices of one axis of a statement over `ndim` axes, at dim `pos` (broadcast over the others)."""
    shape = [1] * ndim
    shape[pos] = n
    return torch.arange(n, dtype=torch.int64, device=device).reshape(shape)


def _fit(v, shape) -> torch.Tensor:
    """A statement's value over its whole index space (constants and values that vary over fewer axes
    are broadcast)."""
    return torch.broadcast_to(_t(v), tuple(shape))


def _region(x: torch.Tensor, sizes) -> torch.Tensor:
    """The leading `sizes` of each dim of `x`: zero-padded past its end (rows of a partial last row block),
    or cut short (the padding of a column-major layout)."""
    if all(s == d for s, d in zip(sizes, x.shape)):
        return x
    out = torch.zeros(tuple(sizes), dtype=x.dtype, device=x.device)
    common = tuple(slice(0, min(s, d)) for s, d in zip(sizes, x.shape))
    out[common] = x[common]
    return out


def _arrange(t: torch.Tensor, have, want) -> torch.Tensor:
    """A tensor whose dims are the axes `have`, as one over the axes `want` (permuted; size 1 where it does
    not vary)."""
    order = [have.index(a) for a in want if a in have]
    if len(order) != len(have):
        raise ValueError(f"axes {have} do not fit a statement over {want}")
    if order != sorted(order):
        t = t.permute(order)
    present = [a for a in want if a in have]
    return t.reshape([t.shape[present.index(a)] if a in have else 1 for a in want])


def _view(x: torch.Tensor, sizes, flat, fixed, have, want) -> torch.Tensor:
    """A tensor read through its view: storage dims (zero-padded to `sizes`) split into one dim per axis
    (`flat`), the dims of `fixed` (dim, index) pinned, arranged for a statement over `want`."""
    v = _region(x, sizes).reshape(tuple(flat))
    for dim, index in reversed(fixed):
        v = v.select(dim, index)
    return _arrange(v, tuple(have), tuple(want))


def _as_bits(t: torch.Tensor) -> torch.Tensor:
    """Elements as integers of the same width (where and index_put move them bit for bit)."""
    if not t.is_floating_point() or t.dtype in (torch.float32, torch.float64):
        return t
    return t.view({1: torch.int8, 2: torch.int16}[t.element_size()])


def _store_view(out: torch.Tensor, sizes, flat, have, axes, value, guard, accumulate) -> None:
    """Write (or add) a statement's value over `axes` into `out` through its view, where `guard` holds;
    elements past the tensor's end (a partial row block) are dropped, and what lies past the view (the
    padding of a column-major layout) is left alone."""
    region = _region(out, sizes)
    padded = region if region is not out else out.contiguous()
    view = padded.reshape(tuple(flat))
    v = _arrange(_t(value).to(out.dtype) if not accumulate else _t(value), tuple(axes), tuple(have)).expand(view.shape)
    g = None if guard is None else _arrange(_t(guard), tuple(axes), tuple(have)).expand(view.shape)
    if accumulate:
        view += v if g is None else torch.where(g, v, torch.zeros((), dtype=v.dtype))
    else:
        target = _as_bits(view)
        target.copy_(_as_bits(v) if g is None else torch.where(g, _as_bits(v), target))
    if padded is not out:
        common = tuple(slice(0, min(s, d)) for s, d in zip(sizes, out.shape))
        out[common] = padded[common]


def _gather(x: torch.Tensor, idx, guard) -> torch.Tensor:
    """x[idx] elementwise (index tensors broadcast); where `guard` is false the index is not used and the
    element is x's zero."""
    idx = [_t(i) for i in idx]
    shape = torch.broadcast_shapes(*[i.shape for i in idx], *(() if guard is None else (_t(guard).shape,)))
    idx = [torch.broadcast_to(i, shape) for i in idx]
    if guard is None:
        return x[tuple(idx)]
    ok = torch.broadcast_to(_t(guard), shape)
    if not x.numel():
        return torch.zeros(shape, dtype=x.dtype, device=x.device)
    got = x[tuple(torch.where(ok, i, 0) for i in idx)]
    return torch.where(ok, _as_bits(got), torch.zeros((), dtype=_as_bits(got).dtype)).view(x.dtype)


def _take(x: torch.Tensor, idx, guard=None) -> torch.Tensor:
    """An element of a tile at explicit indices (the reference's whole tensor of the tile buffer)."""
    return _gather(x, idx, guard)


def _scatter(out: torch.Tensor, idx, value, guard, accumulate) -> None:
    """out[idx] = value (or += for `accumulate`, where positions may repeat) where `guard` holds."""
    idx = [_t(i) for i in idx]
    value = _t(value)
    parts = [*idx, value] + ([] if guard is None else [_t(guard)])
    shape = torch.broadcast_shapes(*[p.shape for p in parts])
    idx = [torch.broadcast_to(i, shape) for i in idx]
    value = torch.broadcast_to(value, shape)
    ok = torch.ones(shape, dtype=torch.bool, device=out.device) if guard is None else \
        torch.broadcast_to(_t(guard), shape)
    sel = tuple(i[ok] for i in idx)
    if accumulate:
        out.index_put_(sel, value[ok].to(out.dtype), accumulate=True)
    else:
        _as_bits(out).index_put_(sel, _as_bits(value.to(out.dtype))[ok])
