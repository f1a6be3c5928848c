"""apply_rotary (TileKernels 2.1.0's transform.apply_rotary): the kernel against its generated reference bit
for bit, against an independent float64 rotation within a stated bound, in place on strided views (head
splits, slices of wider heads: the other columns keep their bits), the conjugate undoing the rotation, and
the TileKernels-compatible entry point with its 4-D shapes, positions and seqlen_offset."""
import importlib

import pytest
import torch

import tkgen.compat.tilekernels as tk
import tkgen.ops
from tkgen import registry


def reference(query, positions, cache, interleaved, conjugate):
    module = importlib.import_module(registry.op_package("apply_rotary").__name__ + ".reference")
    fn = module.VARIANTS[f"{str(interleaved).lower()}_{str(conjugate).lower()}"]
    return fn(query, positions, cache)[0]


def cache_of(rows, r, gen, scale=1.0):
    """A cos/sin cache as models build it (angles of a geometric frequency ladder), times `scale`."""
    inv = 1.0 / (10000.0 ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    ang = torch.arange(rows, dtype=torch.float64)[:, None] * inv[None, :]
    ang = ang + torch.rand(ang.shape, generator=gen, dtype=torch.float64)    # not only the usual angles
    return (torch.cat([ang.cos(), ang.sin()], dim=1) * scale).to(torch.float32)


def rotation64(x, positions, cache, interleaved, conjugate):
    """The rotation in float64 from its definition (no fma order): (x1 cos - x2 sin, x1 sin + x2 cos)."""
    r = x.shape[-1]
    x = x.to(torch.float64)
    rows = cache.to(torch.float64)[positions.long()]                       # [T, R]
    cos, sin = rows[:, None, : r // 2], rows[:, None, r // 2:]
    sin = -sin if conjugate else sin
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., : r // 2], x[..., r // 2:])
    y1, y2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    out = torch.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = y1, y2
    else:
        out[..., : r // 2], out[..., r // 2:] = y1, y2
    return out, (x1 * cos).abs() + (x2 * sin).abs(), (x1 * sin).abs() + (x2 * cos).abs(), interleaved


def spread(a, b, interleaved):
    out = torch.empty(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = a, b
    else:
        out[..., : a.shape[-1]], out[..., a.shape[-1]:] = a, b
    return out


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    bits = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[a.dtype]
    a, b = a.contiguous().view(bits), b.contiguous().view(bits)
    nan = torch.isnan(a.view(torch.bfloat16 if bits is torch.int16 else torch.float32))
    assert torch.equal(torch.where(nan, 0, a), torch.where(nan, 0, b)), (a != b).nonzero()[:5]


CASES = [(dt, r, il, cj) for dt in (torch.bfloat16, torch.float32) for r in (64, 128)
         for il in (False, True) for cj in (False, True)]


@pytest.mark.parametrize("dtype, r, interleaved, conjugate", CASES)
def test_matches_reference_bits_and_float64_rotation(dtype, r, interleaved, conjugate):
    gen = torch.Generator().manual_seed(r * 7 + interleaved * 2 + conjugate)
    t, heads, rows = 37, 5, 300
    wide = torch.randn(t, heads, r + 48, generator=gen).to(dtype)          # q[..., -R:] of wider heads
    before = wide.clone()
    q = wide[..., -r:]
    cache = cache_of(rows, r, gen)
    pos = torch.randint(0, rows, (t,), generator=gen, dtype=torch.int32)
    want = reference(q.clone(), pos, cache, interleaved, conjugate)
    x0 = q.clone()
    assert tkgen.ops.apply_rotary(q, pos, cache, interleaved=interleaved, conjugate=conjugate) is None
    same_bits(q, want)
    same_bits(wide[..., :-r], before[..., :-r])                          # the other columns untouched
    exact, m1, m2, _ = rotation64(x0, pos, cache, interleaved, conjugate)
    # fma(x1, c, -(x2 s)): x2 s rounded once (2^-24 of it), the sum once (2^-24 of the result) in float32,
    # then the result rounded to the dtype (2^-24 for float32, 2^-8 for bf16) and subnormal steps
    mag = spread(m1, m2, interleaved)
    unit = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -24
    bound = 2.0 ** -24 * mag + unit * exact.abs() + 2.0 ** -23 * mag + 2.0 ** -140
    assert ((q.to(torch.float64) - exact).abs() <= bound).all()


@pytest.mark.parametrize("interleaved", [False, True])
def test_head_split_view_in_place_and_conjugate_undoes(interleaved):
    gen = torch.Generator().manual_seed(11)
    t, heads, r = 29, 8, 64
    qkv = torch.randn(t, 3 * heads, r, generator=gen)                    # a fused qkv projection
    before = qkv.clone()
    q, k = qkv[:, :heads], qkv[:, heads: 2 * heads]                      # head splits: token stride 3*H*R
    cache = cache_of(64, r, gen)
    pos = torch.randint(0, 64, (t,), generator=gen, dtype=torch.int64)
    want_q = reference(q.contiguous(), pos, cache, interleaved, False)
    tk.transform.apply_rotary(q, cache, key=k, positions=pos, interleaved=interleaved)
    same_bits(q, want_q)
    same_bits(k, reference(before[:, heads: 2 * heads].contiguous(), pos, cache, interleaved, False))
    same_bits(qkv[:, 2 * heads:], before[:, 2 * heads:])                 # v untouched
    tk.transform.apply_rotary(q, cache, key=k, positions=pos, interleaved=interleaved, conjugate=True)
    # the inverse rotation with rounded sin and cos (|cos^2 + sin^2 - 1| of a few ulps) and two fma roundings
    assert torch.allclose(qkv, before, rtol=0, atol=2e-6 * before.abs().max().item())


@pytest.mark.parametrize("mode", ["none", "int32", "int64", "broadcast"])
def test_4d_positions_and_offset(mode):
    gen = torch.Generator().manual_seed(5)
    b, length, heads, r, offset = 3, 13, 4, 128, 17
    q = torch.randn(b, length, heads, r, generator=gen).to(torch.bfloat16)
    cache = cache_of(64, r, gen)
    rows = {"none": None,
            "int32": torch.randint(0, 40, (b, length), generator=gen, dtype=torch.int32),
            "int64": torch.randint(0, 40, (b, length), generator=gen, dtype=torch.int64),
            "broadcast": torch.randint(0, 40, (length,), generator=gen,
                                       dtype=torch.int32)[None].expand(b, length)}[mode]
    at = (torch.arange(length)[None].expand(b, length) if rows is None else rows.long()) + offset
    want = torch.stack([reference(q[i].clone(), at[i].to(torch.int32), cache, False, False) for i in range(b)])
    tk.transform.apply_rotary(q, cache, positions=rows, seqlen_offset=offset)
    same_bits(q, want)
    # a batch stride that does not merge with the tokens' (every other token of a longer sequence)
    long = torch.randn(b, 2 * length, heads, r, generator=gen)
    before = long.clone()
    view = long[:, ::2]
    want = torch.stack([reference(view[i].contiguous(), at[i].to(torch.int32), cache, True, False) for i in range(b)])
    tk.transform.apply_rotary(view, cache, positions=rows, interleaved=True, seqlen_offset=offset)
    same_bits(view, want)
    same_bits(long[:, 1::2], before[:, 1::2])


def test_specials_and_outside_positions():
    gen = torch.Generator().manual_seed(3)
    t, heads, r = 6, 2, 64
    q = torch.randn(t, heads, r, generator=gen)
    q[0, 0, :4] = torch.tensor([-0.0, float("nan"), float("inf"), -float("inf")])
    q[1, 0] = torch.finfo(torch.float32).max
    q[2, 1, ::3] = -0.0
    cache = cache_of(10, r, gen)
    cache[3, 5] = -0.0
    pos = torch.tensor([0, 3, 9, -1, 10, 3], dtype=torch.int32)          # -1 and 10 lie outside: cos = sin = 0
    want = reference(q.clone(), pos, cache, False, False)
    x0 = q.clone()
    tkgen.ops.apply_rotary(q, pos, cache)
    same_bits(q, want)
    assert torch.isnan(q[0, 0]).any() and torch.isinf(q[1, 0]).any()    # x*cos of the max overflows
    assert (q[3] == 0).all() and (q[4] == 0).all()
    # fma(x1, 0, -(x2 * 0)): +0 unless both addends are -0
    assert torch.equal(torch.signbit(q[3, 0, :32]), torch.signbit(x0[3, 0, :32]) & ~torch.signbit(x0[3, 0, 32:]))


def test_arguments_are_checked():
    q = torch.zeros(4, 2, 64)
    cache = torch.zeros(8, 64)
    with pytest.raises(ValueError, match="R == 64 or R == 128"):
        tkgen.ops.apply_rotary(torch.zeros(4, 2, 32), torch.zeros(4, dtype=torch.int32), torch.zeros(8, 32))
    with pytest.raises(ValueError, match="contiguous last dim"):
        tkgen.ops.apply_rotary(torch.zeros(4, 64, 2).transpose(1, 2), torch.zeros(4, dtype=torch.int32), cache)
    with pytest.raises(ValueError, match="positions must have shape"):
        tk.transform.apply_rotary(q, cache, positions=torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="key must have"):
        tk.transform.apply_rotary(q, cache, key=torch.zeros(4, 2, 64, dtype=torch.bfloat16))


def test_strided_kernels_lower_for_both_cuda_archs():
    """The CUDA kernels take the strides as runtime sizes and use one-rounding fmas. No GPU needed."""
    from tkgen.runtime.compile import lower_source
    from tkgen.runtime.kernels import kernel_module
    for arch in ("sm90", "sm100"):
        src = lower_source(kernel_module(registry.op_package("apply_rotary"), arch), "true_true", (4, 64, "bf16", "int64"))
        assert "__global__" in src and "S_query_0" in src and "__fmaf_rn" in src, arch


def test_views_off_the_16_byte_loads_are_refused_by_the_op_and_copied_by_the_compat_layer():
    """The kernel assumes strides and start on its 16-byte load granule (docs/spec-language.md, `strided`):
    tkgen.ops refuses a slice that starts 2 bytes in; TileKernels' entry point rotates it through a copy,
    leaving the columns outside the slice as they were."""
    gen = torch.Generator().manual_seed(7)
    base = torch.randn(5, 3, 67, generator=gen).to(torch.bfloat16)
    q, before = base[..., 1:65], base.clone()
    cache, pos = cache_of(16, 64, gen), torch.randint(0, 16, (5,), generator=gen, dtype=torch.int32)
    with pytest.raises(ValueError, match="`query` must start on 16 bytes"):
        tkgen.ops.apply_rotary(q, pos, cache)
    want = q.clone()
    tkgen.ops.apply_rotary(want, pos, cache)
    tk.transform.apply_rotary(q, cache, positions=pos)
    assert torch.equal(q.view(torch.int16), want.view(torch.int16))
    assert torch.equal(base[..., 0], before[..., 0]) and torch.equal(base[..., 65:], before[..., 65:])
