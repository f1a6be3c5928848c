"""TileKernels 2.1.0's `set_amax_clamp_for_quant` in tkgen's compat layer: the stored floor of each
(fmt, use_e4m3_sf) is the amax floor of the casts made afterwards, a = max(amax, floor) before the scale.
Each cast is compared bit for bit with a float model written here (numpy float32 arithmetic, torch's
float8_e4m3fn conversion of clamped values, and a table of e2m1's values), at floors above the data's amax,
tiny ones and the defaults; plus the checks of the value and what reset_runtime_config restores."""
import math

import numpy as np
import pytest
import torch

import tkgen.compat.tilekernels as tk
import tkgen.ops as ops

E4M3_MAX, E2M1_MAX = 448.0, 6.0
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
DEFAULT = {("e4m3", False): 1e-4, ("e4m3", True): 448 * 2.0 ** -9,
           ("e2m1", False): 6 * 2.0 ** -126, ("e2m1", True): 6 * 2.0 ** -9}


@pytest.fixture(autouse=True)
def _reset():
    tk.reset_runtime_config()
    yield
    tk.reset_runtime_config()


def data(rows, cols, seed=0):
    """float32 normal values, with rows and columns whose amax lies below the floors: zeros, 1e-10 and
    1e-30 times normal values, and a half-zero row."""
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))
    x[1] = 0
    x[2] *= 1e-10
    x[3] *= 1e-30
    x[4, :cols // 2] = 0
    x[:, 5] = 0
    x[:, 6] *= 1e-10
    return x


# -- the model ---------------------------------------------------------------------------------------------
def e4m3(v):
    """float32 values -> float8_e4m3fn, to nearest even, saturating at 448."""
    return torch.from_numpy(np.clip(v, -E4M3_MAX, E4M3_MAX).astype(np.float32)).to(torch.float8_e4m3fn)


def e2m1_codes(v):
    """float32 values -> e2m1 codes (sign bit 8, magnitude index 0..7), to nearest even, saturating at 6."""
    m = np.abs(v.astype(np.float64))
    lo = np.clip(np.searchsorted(E2M1, m, side="right") - 1, 0, 7)
    hi = np.minimum(lo + 1, 7)
    dlo, dhi = m - E2M1[lo], E2M1[hi] - m
    idx = np.where(m >= E2M1_MAX, 7, np.where(dlo < dhi, lo, np.where(dlo > dhi, hi, np.where(lo % 2 == 0, lo, hi))))
    return (idx | (np.signbit(v).astype(np.int64) << 3)).astype(np.uint8)


def pack_e2m1(codes):
    """Codes [T, H] -> int8 [T, H / 2], element 2i in the low nibble."""
    return torch.from_numpy((codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)).view(torch.int8)


def scale_pair(a, fmt_max, rule):
    """(sf as stored, inv) of a float32 amax `a` by scale rule fp32 (a / max, max / a), pow2 (2^ceil(log2(a /
    max)) and its inverse) or e4m3 (e4m3(max(a, max * 2^-9) / max), 1 / sf)."""
    m = np.float32(fmt_max)
    if rule == "fp32":
        return torch.from_numpy(a / m), (m / a).astype(np.float32)
    if rule == "pow2":
        mant, e = np.frexp((a / m).astype(np.float32))
        k = np.where(mant == 0.5, e - 1, e)
        return torch.from_numpy(np.ldexp(np.float32(1), k).astype(np.float32)), np.ldexp(np.float32(1), -k).astype(
            np.float32)
    assert rule == "e4m3"
    sf = e4m3((np.maximum(a, np.float32(fmt_max * 2.0 ** -9)) / m).astype(np.float32))
    return sf, (np.float32(1) / sf.float().numpy()).astype(np.float32)


def model_cast(x, fmt, floor, rule, rows, cols):
    """(q, sf) of x [T, H] float32 in blocks of rows x cols (rows cut at T): a = max(amax(|x|), floor) per
    block, the scale pair of `rule`, q = fmt(x * inv) in float32."""
    v = x.numpy()
    t, h = v.shape
    nb = -(-t // rows)
    pad = np.zeros((nb * rows, h), np.float32)
    pad[:t] = np.abs(v)
    amax = pad.reshape(nb, rows, h // cols, cols).max(axis=(1, 3))
    a = np.maximum(amax, np.float32(floor)).astype(np.float32)
    sf, inv = scale_pair(a, E4M3_MAX if fmt == "e4m3" else E2M1_MAX, rule)
    y = (v * np.repeat(np.repeat(inv, rows, axis=0)[:t], cols, axis=1)).astype(np.float32)
    return (e4m3(y) if fmt == "e4m3" else pack_e2m1(e2m1_codes(y))), sf


def same_bits(got, want):
    got, want = got.contiguous(), want.contiguous()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    g, w = got.view(torch.uint8), want.view(torch.uint8)
    bad = (g != w).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} bytes differ, first at {bad[0].tolist()}"


# -- per_token_cast ----------------------------------------------------------------------------------------
# (fmt, num_per_channels, (round_sf, use_e4m3_sf), the model's scale rule, floors); floors with e4m3 scales
# at or above the default
PER_TOKEN = [("e4m3", 128, (False, False), "fp32", [100.0, 1e-20]),
             ("e4m3", 128, (True, False), "pow2", [3.0]),
             ("e4m3", 32, (False, True), "e4m3", [3.0]),
             ("e2m1", 32, (False, False), "fp32", [3.0, 1e-20]),
             ("e2m1", 32, (False, True), "e4m3", [100.0])]


@pytest.mark.parametrize("fmt, npc, flags, rule, floors", PER_TOKEN)
def test_per_token_cast(fmt, npc, flags, rule, floors):
    x = data(9, 256)
    round_sf, e4m3_sf = flags
    call = lambda: tk.quant.per_token_cast(x, fmt, npc, round_sf=round_sf, use_e4m3_sf=e4m3_sf)  # noqa: E731
    default = call()
    for got, want in zip(default, model_cast(x, fmt, DEFAULT[fmt, e4m3_sf], rule, 1, npc)):
        same_bits(got, want)
    for got, want in zip(default, ops.per_token_cast(x, fmt, npc, {"fp32": "fp32", "pow2": "pow2"}.get(rule, "e4m3"))):
        same_bits(got, want)
    for floor in floors:
        tk.set_amax_clamp_for_quant(fmt, e4m3_sf, floor)
        assert tk.get_amax_clamp_for_quant(fmt, e4m3_sf) == floor
        got = call()
        for g, w in zip(got, model_cast(x, fmt, floor, rule, 1, npc)):
            same_bits(g, w)
    assert not torch.equal(got[1].view(torch.uint8), default[1].view(torch.uint8))
    tk.reset_runtime_config()
    for g, w in zip(call(), default):
        same_bits(g, w)


def test_floor_of_the_other_key_is_not_used():
    """The floor of (e4m3, use_e4m3_sf=True) leaves casts with float32 scales (and e2m1 casts) alone."""
    x = data(9, 256)
    want = tk.quant.per_token_cast(x, "e4m3", 128)
    tk.set_amax_clamp_for_quant("e4m3", True, 100.0)
    tk.set_amax_clamp_for_quant("e2m1", False, 100.0)
    for g, w in zip(tk.quant.per_token_cast(x, "e4m3", 128), want):
        same_bits(g, w)


# -- per_block_cast, per_channel_cast, a fused cast --------------------------------------------------------
@pytest.mark.parametrize("floor", [None, 100.0, 1e-20])
def test_per_block_cast(floor):
    x = data(40, 256)
    if floor is not None:
        tk.set_amax_clamp_for_quant("e4m3", False, floor)
    q, sf = tk.quant.per_block_cast(x, "e4m3", (32, 128))
    wq, wsf = model_cast(x, "e4m3", DEFAULT["e4m3", False] if floor is None else floor, "fp32", 32, 128)
    same_bits(q, wq)
    same_bits(sf, wsf)


@pytest.mark.parametrize("floor", [None, 3.0, 1e-20])
def test_per_channel_cast(floor):
    x = data(64, 128)
    if floor is not None:
        tk.set_amax_clamp_for_quant("e4m3", False, floor)
    q, sf = tk.quant.per_channel_cast(x, "e4m3", 32)
    wq, wsf = model_cast(x, "e4m3", DEFAULT["e4m3", False] if floor is None else floor, "fp32", 32, 1)
    same_bits(q, wq)
    same_bits(sf, wsf)


@pytest.mark.parametrize("floor", [None, 100.0, 1e-20])
def test_swiglu_forward_and_per_token_cast(floor):
    """The SwiGLU values y from tkgen's swiglu_forward in float32 (the same expression, the fused kernel's
    exp), then the model's per-token cast of y."""
    x = data(9, 512)
    x[2] *= 1e5             # a row whose activations lie between 1e-20 and 1e-4
    y = tk.quant.swiglu_forward(x, "fp32")
    if floor is not None:
        tk.set_amax_clamp_for_quant("e4m3", False, floor)
    q, sf = tk.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128)
    wq, wsf = model_cast(y, "e4m3", DEFAULT["e4m3", False] if floor is None else floor, "fp32", 1, 128)
    same_bits(q, wq)
    same_bits(sf, wsf)


# -- the value ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, -math.inf, 1e-50, 1e39, "1.0", True, None])
def test_invalid_values_raise(value):
    with pytest.raises(ValueError, match="clamp_min_value"):
        tk.set_amax_clamp_for_quant("e4m3", False, value)
    assert tk.get_amax_clamp_for_quant("e4m3", False) == 1e-4


def test_unknown_format_and_e4m3_scales_below_their_floor():
    with pytest.raises(ValueError, match="fmt"):
        tk.set_amax_clamp_for_quant("e5m2", False, 1.0)
    with pytest.raises(ValueError, match="fmt"):
        tk.get_amax_clamp_for_quant("bf16", False)
    with pytest.raises(NotImplementedError, match="use_e4m3_sf=True and a clamp below"):
        tk.set_amax_clamp_for_quant("e2m1", True, 1e-3)
    assert tk.get_amax_clamp_for_quant("e2m1", True) == 6 * 2.0 ** -9


def test_reset_restores_and_default_passes_no_floor():
    for (fmt, e), v in DEFAULT.items():
        tk.set_amax_clamp_for_quant(fmt, e, 7.0)
        assert tk.config.amax_floor(fmt, e) == {"amax_floor": 7.0}
    tk.set_amax_clamp_for_quant("e4m3", False, 1e-4)        # the default again: the op's own default
    assert tk.config.amax_floor("e4m3") == {}
    tk.reset_runtime_config()
    assert {k: tk.get_amax_clamp_for_quant(*k) for k in DEFAULT} == DEFAULT
    assert all(tk.config.amax_floor(*k) == {} for k in DEFAULT)


def test_the_other_casts_pass_the_stored_floor():
    """The compat casts not modelled above call their ops with the stored floor (each op's amax_floor is held
    to its reference by tests/test_properties.py): the same bits as the op called with it, and not those of
    the default."""
    x = data(64, 256)
    xb = x.bfloat16()
    q8, s8 = ops.per_token_cast(xb, "e4m3", 128)
    g = torch.randn(64, 128, generator=torch.Generator().manual_seed(2)).bfloat16()
    w = torch.randn(256, generator=torch.Generator().manual_seed(3))
    default_sf = tk.quant.per_token_cast_with_sf_only(x, "e4m3", 128)
    tk.set_amax_clamp_for_quant("e4m3", False, 100.0)
    tk.set_amax_clamp_for_quant("e2m1", False, 3.0)
    f = {"amax_floor": 100.0}
    sf = tk.quant.per_token_cast_with_sf_only(x, "e4m3", 128)
    same_bits(sf, ops.per_token_cast_with_sf_only(x, "e4m3", 128, **f))
    assert not torch.equal(sf, default_sf)
    y = x.clone()
    tk.quant.per_token_cast_and_cast_back(y, "e2m1", 32)
    same_bits(y, ops.per_token_cast_and_cast_back(x, "e2m1", 32, "fp32", "fp32", amax_floor=3.0))
    same_bits(tk.quant.per_block_cast_with_sf_only(x, "e4m3", (32, 128)),
              ops.per_block_cast_with_sf_only(x, "e4m3", 32, 128, **f))
    (q, sf), _, _, _ = tk.quant.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 128)
    want = ops.rmsnorm_forward_and_per_token_cast(x, w, None, 1e-6, 1.0, "e4m3", 128, **f)
    same_bits(q, want[0])
    same_bits(sf, want[1])
    for got, want in [(tk.quant.per_token_cast((q8, s8), "e4m3", 128, x_block_size=(1, 128)),
                       ops.per_token_cast_requant(q8, s8, fmt="e4m3", group=128, **f)),
                      (tk.quant.per_token_cast(xb, "e4m3", 128, stochastic_cast=True),
                       ops.per_token_cast_stochastic(xb, 128, **f))]:
        same_bits(got[0], want[0])
        same_bits(got[1], want[1])
    out, out_sf = tk.quant.per_channel_cast((q8, s8), "e4m3", 32)
    want = ops.per_channel_cast_from_fp8(q8, s8, "e4m3", 32, 128, "fp32", "fp32", **f)
    same_bits(out, want[0])
    same_bits(out_sf, want[1].T)
    x_grad, (fp8, fp8_sf) = tk.quant.swiglu_backward_and_per_token_cast((q8, s8), g, "e4m3", 128)
    want = ops.swiglu_backward_and_per_token_cast(q8, s8, g, 128, da_fma=True, **f)
    for got, w in zip((x_grad, fp8, fp8_sf), want[:3]):
        same_bits(got, w)


def test_out_written_with_the_stored_floor():
    """`out=` (the kernel writing into the given tensors) takes the floor too."""
    x = data(9, 256)
    tk.set_amax_clamp_for_quant("e4m3", False, 100.0)
    for call, want in [(lambda out: tk.quant.per_token_cast(x, "e4m3", 128, out=out),
                        model_cast(x, "e4m3", 100.0, "fp32", 1, 128)),
                       (lambda out: tk.quant.per_block_cast(x, "e4m3", (32, 128), out=out),
                        model_cast(x, "e4m3", 100.0, "fp32", 32, 128))]:
        out = (torch.empty_like(want[0]), torch.empty_like(want[1]))
        got = call(out)
        assert got[0] is out[0] and got[1] is out[1]
        same_bits(got[0], want[0])
        same_bits(got[1], want[1])
