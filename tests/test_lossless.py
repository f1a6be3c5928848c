"""per_block_cast_lossless loses nothing where its precondition holds: cast_back of its e4m3 output equals
cast_back of its FP4 input, bit for bit in float32. Checked on the generated references over drawn blocks,
formats and exponent spreads (no compiles), and end to end through `tkgen.ops` on the CPU kernels. Outside
the precondition the kernel still agrees with the reference, and the loss is where the docs say."""
import importlib

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tkgen.ops as ops
from tkgen import registry

BLOCKS = [(1, 128), (32, 32), (128, 128), (1, 32), (32, 128), (128, 32)]
SCALES = ["fp32", "ue8m0", "ue8m0_byte"]


def _ref(op, variant):
    return importlib.import_module(registry.op_package(op).__name__ + ".reference").VARIANTS[variant]


def pack_e2m1(codes):
    """[T, H] codes 0..15 -> int8 [T, H / 2], element 2i in the low nibble."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8).view(torch.int8)


def scales_from_exponents(e, fmt):
    """Biased exponents (int64 [T, G], 1..254) -> a scale tensor of `fmt`: float32 powers of two, UE8M0
    bytes, or those bytes packed four per int32 (little-endian, zero tail)."""
    if fmt == "fp32":
        return (e << 23).to(torch.int32).view(torch.float32)
    if fmt == "ue8m0_byte":
        return e.to(torch.uint8)
    b = torch.nn.functional.pad(e, (0, (-e.shape[1]) % 4))
    w = b[:, 0::4] | (b[:, 1::4] << 8) | (b[:, 2::4] << 16) | (b[:, 3::4] << 24)
    return torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)


def draw_exponents(g, T, H, rows, cols, spread, lo, hi):
    """Input-scale exponents [T, H / 32]: per output block a top exponent in [lo, hi], every input block at
    most `spread` below it."""
    nb = -(-T // rows)
    top = torch.randint(lo, hi + 1, (nb, 1, H // cols, 1), generator=g)
    e = top - torch.randint(0, spread + 1, (nb, rows, H // cols, cols // 32), generator=g)
    return e.reshape(nb * rows, H // 32)[:T]


def per_row(out_sf, rows, T):
    """Block scales [ceil(T / rows), G] as the per-row scales cast_back takes: [T, G], row-major."""
    return out_sf.contiguous().repeat_interleave(rows, dim=0)[:T].contiguous()


def same_f32(a, b):
    return a.dtype == b.dtype == torch.float32 and torch.equal(a.view(torch.int32), b.view(torch.int32))


@settings(max_examples=40)
@given(block=st.sampled_from(BLOCKS), in_scale=st.sampled_from(SCALES), scale=st.sampled_from(SCALES),
       layout=st.sampled_from(["row", "col"]), T=st.integers(0, 300), H=st.sampled_from([128, 384]),
       spread=st.integers(0, 14), seed=st.integers(0, 2 ** 31 - 1))
def test_lossless_on_the_references(block, in_scale, scale, layout, T, H, spread, seed):
    """Normal power-of-two scales at most 14 exponents apart per output block (and, for UE8M0 outputs, a
    largest exponent of at least 7, so that e_out >= 1): the round trip is exact."""
    rows, cols = block
    g = torch.Generator().manual_seed(seed)
    q = pack_e2m1(torch.randint(0, 16, (T, H), generator=g))          # every code, -0 included
    lo = spread + (1 if scale == "fp32" else 7)        # every exponent >= 1 (>= 7: e_out >= 1)
    e = draw_exponents(g, T, H, rows, cols, spread, lo, 254)
    sf = scales_from_exponents(e, in_scale)
    out, out_sf = _ref("per_block_cast_lossless", f"{in_scale}_{scale}_{layout}")(q, sf, rows, cols, 32)
    assert out.dtype == torch.float8_e4m3fn and out.shape == (T, H)
    want, = _ref("cast_back", f"e2m1_{in_scale}_fp32")(q, sf, 32, 1)
    got, = _ref("cast_back", f"e4m3_{scale}_fp32")(out, per_row(out_sf, rows, T), cols, 1)
    assert same_f32(got, want)


def _fp4_tilekernels_style(T, H, seed):
    """FP4 codes and UE8M0 scales as TileKernels' test makes them: magnitudes floored at max|x| / 2^9, so
    the group scales of a block stay within 2^11, then a per-token cast to e2m1 in 1 x 32 groups."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g) * torch.exp2(torch.randint(-4, 5, (T, H), generator=g).float())
    floor = x.abs().max() / 2 ** 9
    x = torch.where(x.abs() < floor, floor.copysign(x), x).bfloat16()
    return _ref("per_token_cast", "e2m1_ue8m0_byte_row")(x, 32, 0.0)      # amax_floor 0: the format's floor


def test_lossless_end_to_end_on_cpu_kernels():
    T, H, rows, cols = 300, 384, 128, 128          # the last row block has 44 rows
    q, sf = _fp4_tilekernels_style(T, H, 3)
    want = ops.cast_back(q, sf, "e2m1", 32, scale="ue8m0_byte", out="fp32")
    out, out_sf = ops.per_block_cast_lossless(q, sf, rows, cols, in_scale="ue8m0_byte", scale="fp32")
    got = ops.cast_back(out, per_row(out_sf, rows, T), "e4m3", cols, scale="fp32", out="fp32")
    assert same_f32(got, want)


def test_outside_the_precondition_kernel_and_reference_agree_and_the_loss_is_the_rounding():
    """Exponent spreads of up to 190 in a block: multipliers down to subnormals and zero. The CPU kernel
    matches the reference bit for bit, the values are e4m3(q * 2^(e_in - e_out)) by an independent
    float64 computation, and the round trip is exact wherever e_in >= e_max - 14."""
    T, H, rows, cols = 9, 384, 128, 128
    g = torch.Generator().manual_seed(7)
    codes = torch.randint(0, 16, (T, H), generator=g)
    q = pack_e2m1(codes)
    e = torch.randint(10, 201, (T, H // 32), generator=g)
    e[1, 0::4] = 200                                   # the largest exponent of each output block
    # one row walks through n = e_in - e_out = -7, -8, -9, ..., the subnormal multipliers and zero
    e[0, :] = torch.tensor([200, 187, 186, 185, 200, 180, 170, 150, 200, 60, 50, 10])
    sf = scales_from_exponents(e, "ue8m0_byte")
    out, out_sf = ops.per_block_cast_lossless(q, sf, rows, cols, in_scale="ue8m0_byte", scale="fp32")
    ref_out, ref_sf = _ref("per_block_cast_lossless", "ue8m0_byte_fp32_row")(q, sf, rows, cols, 32)
    assert torch.equal(out.view(torch.uint8), ref_out.view(torch.uint8))
    assert same_f32(out_sf, ref_sf)
    # independent: e_out from the bytes, q from ml_dtypes' FP4 table, the product in float64
    import ml_dtypes
    import numpy as np
    qf = torch.from_numpy(codes.numpy().astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64))
    e_out = (e.view(T, H // cols, 4).amax(dim=(0, 2)) - 6).clamp(min=0)
    n = e - e_out.repeat_interleave(4)
    want = (qf * torch.exp2(n.double()).repeat_interleave(32, 1)).float().clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))
    assert same_f32(out_sf, torch.exp2(e_out.double() - 127).float()[None])
    # lossless wherever the exponent is within 14 of the block's largest (or the code is zero)
    back = out.float() * out_sf.repeat_interleave(cols, 1)
    orig = (qf * torch.exp2(e.double() - 127).repeat_interleave(32, 1)).float()
    ok = (n >= -8).repeat_interleave(32, 1) | (qf == 0)
    assert torch.equal(back[ok].view(torch.int32), orig[ok].view(torch.int32))
    assert not bool((back[~ok] == orig[~ok]).all())


def test_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    ops.per_block_cast_lossless  # noqa: B018  (importing registers the custom op)
    with FakeTensorMode():
        q, sf = torch.empty(130, 192, dtype=torch.int8), torch.empty(130, 3, dtype=torch.int32)  # H = 384
        out, out_sf = torch.ops.tkgen.per_block_cast_lossless(q, sf, 32, 32, 32, "ue8m0", "ue8m0", "col")
        assert out.shape == (130, 384) and out.dtype == torch.float8_e4m3fn
        assert out_sf.shape == (5, 3) and out_sf.dtype == torch.int32 and out_sf.stride() == (1, 8)
        _, out_sf = torch.ops.tkgen.per_block_cast_lossless(q, sf, 128, 128, 32, "ue8m0", "ue8m0_byte", "row")
        assert out_sf.shape == (2, 3) and out_sf.dtype == torch.uint8
