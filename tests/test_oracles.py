"""The generated references checked against independent oracles: torch's own float8 cast, a stable sort.

Oracles are written here by hand, per operator, on purpose: they must not share code with tkgen.
"""
import importlib

import pytest
import torch
from hypothesis import assume, given, settings

from tkgen import registry
from tkgen.testing.check import reference_outputs
from tkgen.testing.inputs import build_inputs


def _cases(name):
    return importlib.import_module(registry.op_package(name).__name__ + ".strategies").cases()


import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

MAX = {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0, "e5m6": 65024.0}
FLOOR = {"e4m3": 1e-4, "e5m2": 1e-4, "e2m1": 6 * 2.0 ** -126, "e5m6": 1e-4}


def _e5m6_codes(v):
    """TileKernels' stated E5M6 procedure: fp16 toward zero, top 12 bits, carry on the low float32 bits."""
    h = v.to(torch.float16)
    hb = h.view(torch.int16).to(torch.int64) & 0xFFFF
    hb = torch.where(h.float().abs() > v.abs(), hb - 1, hb)
    q = hb >> 4
    return (q + (((q & 1) + (v.view(torch.int32).to(torch.int64) & 0x1FFFF)) > 0x10000).to(torch.int64)) & 0xFFF


def oracle_encode(v, fmt):
    """float32 [T, H] -> the container tensor: torch's float8 casts, ml_dtypes' FP4, the E5M6 procedure;
    FP4 packed two per byte (low nibble first), E5M6 eight per three little-endian words."""
    if fmt in ("e4m3", "e5m2"):
        dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
        return v.clamp(-MAX[fmt], MAX[fmt]).to(dtype)
    T = v.shape[0]
    if fmt == "e2m1":
        c = torch.from_numpy(v.numpy().astype(ml_dtypes.float4_e2m1fn).view(np.uint8).astype(np.int64)) & 0xF
        return (c[:, 0::2] | (c[:, 1::2] << 4)).to(torch.uint8).view(torch.int8)
    h = _e5m6_codes(v).reshape(T, v.shape[1] // 8, 8)
    w0 = h[..., 0] << 20 | h[..., 1] << 8 | h[..., 2] >> 4
    w1 = (h[..., 2] & 0xF) << 28 | h[..., 3] << 16 | h[..., 4] << 4 | h[..., 5] >> 8
    w2 = (h[..., 5] & 0xFF) << 24 | h[..., 6] << 12 | h[..., 7]
    words = torch.stack([w0, w1, w2], -1).reshape(T, v.shape[1] // 8 * 3)
    return torch.stack([(words >> (8 * b)) & 0xFF for b in range(4)], -1).reshape(T, v.shape[1] * 3 // 2).to(torch.uint8)


def oracle_scales(amax, fmt, scale):
    if scale == "e4m3":
        # TileKernels' E4M3 scales: the amax floored at MAX * 2^-9, sf = e4m3(a / MAX), inv = 1 / sf
        a = amax.clamp(min=MAX[fmt] * 2.0 ** -9)
        sf = (a / MAX[fmt]).clamp(max=448.0).to(torch.float8_e4m3fn)
        return sf, torch.ones_like(a) / sf.float()
    if scale == "fp32":
        return amax / MAX[fmt], torch.full_like(amax, MAX[fmt]) / amax     # true divisions
    e = torch.ceil(torch.log2(amax.double() / MAX[fmt]))                  # exact in float64 here
    return torch.exp2(e).float(), torch.exp2(-e).float()


def _f32(v):
    """A Python float rounded to float32, as a compile-time float param reaches the kernel."""
    return torch.tensor(v, dtype=torch.float32).item()


def oracle_per_token_cast(x, fmt, group, scale, sf_layout="row", amax_floor=0.0):
    """amax_floor > 0 floors each group's amax; 0 means the format's own floor FLOOR[fmt]."""
    T, H = x.shape
    xf = x.float().reshape(T, H // group, group)
    amax = xf.abs().amax(-1).clamp(min=_f32(amax_floor if amax_floor > 0 else FLOOR[fmt]))
    sf, inv = oracle_scales(amax, fmt, scale)
    q = oracle_encode((xf * inv[..., None]).reshape(T, H), fmt)
    if scale.startswith("ue8m0"):
        byte = (torch.log2(sf.double()).round() + 127).to(torch.int64)
        sf = byte.to(torch.uint8)
    if scale == "ue8m0":
        pad = (-byte.shape[1]) % 4
        words = torch.nn.functional.pad(byte, (0, pad)).reshape(T, (byte.shape[1] + pad) // 4, 4)
        w = words[..., 0] | (words[..., 1] << 8) | (words[..., 2] << 16) | (words[..., 3] << 24)
        sf = torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)
    return q, sf


def same_bits(a, b):
    """Same dtype, shape and logical bytes (strided layouts compare their elements, not their padding);
    NaNs in the same places."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    std = lambda t: t.clone(memory_format=torch.contiguous_format)  # noqa: E731
    a, b = std(a), std(b)
    if a.dtype.is_floating_point:
        # NaN in the same places; its sign and payload are not specified (torch's own casts differ)
        nan = torch.isnan(a.float())
        if not torch.equal(nan, torch.isnan(b.float())):
            return False
        a, b = a[~nan], b[~nan]
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_per_token_cast_reference_vs_torch_float8():
    pkg = registry.op_package("per_token_cast")

    @given(_cases("per_token_cast"))
    def prop(case):
        x = build_inputs(case)["x"]
        p = case["params"]
        q, sf = reference_outputs(pkg.OP, pkg, {"x": x}, p)
        oq, osf = oracle_per_token_cast(x, p["fmt"], p["group"], p["scale"], amax_floor=p["amax_floor"])
        assert same_bits(q, oq)
        assert same_bits(sf, osf)
        if p["sf_layout"] == "col":       # column-major, rows padded to 16 bytes
            pad = 16 // sf.element_size()
            assert sf.stride() == (1, -(-sf.shape[0] // pad) * pad) or sf.numel() <= 1
    prop()


def oracle_decode(q, fmt, H):
    if fmt in ("e4m3", "e5m2"):
        return q.float()
    if fmt == "e2m1":
        b = q.view(torch.uint8).to(torch.int64)
        c = torch.stack([b & 0xF, b >> 4], -1).reshape(q.shape[0], H)
        return torch.from_numpy(c.numpy().astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32))
    by = q.to(torch.int64).reshape(q.shape[0], H // 8, 3, 4)
    w = by[..., 0] | by[..., 1] << 8 | by[..., 2] << 16 | by[..., 3] << 24
    w0, w1, w2 = w[..., 0], w[..., 1], w[..., 2]
    h = torch.stack([w0 >> 20, (w0 >> 8) & 0xFFF, ((w0 & 0xFF) << 4) | (w1 >> 28), (w1 >> 16) & 0xFFF,
                     (w1 >> 4) & 0xFFF, ((w1 & 0xF) << 8) | (w2 >> 24), (w2 >> 12) & 0xFFF, w2 & 0xFFF], -1)
    return (h.reshape(q.shape[0], H) << 4).to(torch.int32).to(torch.int16).view(torch.float16).float()


def _input_scales(sf, scale, G):
    """float32 [rows, G] values of a scale input: float32, e4m3 codes (torch's decode), or UE8M0 bytes, one
    per uint8 or four per int32 word."""
    if scale == "fp32":
        return sf
    if scale == "e4m3":
        return sf.float()
    b = sf.contiguous().view(torch.uint8).to(torch.int64).reshape(sf.shape[0], sf.shape[1] * sf.element_size())
    return torch.exp2(b[:, :G].double() - 127).float()


def test_cast_back_reference_vs_independent_decoders():
    pkg = registry.op_package("cast_back")

    @given(_cases("cast_back"))
    def prop(case):
        t = build_inputs(case)
        p = case["params"]
        T, H = case["dims"]["T"], case["dims"]["H"]
        (y,) = reference_outputs(pkg.OP, pkg, t, p)
        sf = _input_scales(t["sf"], p["scale"], H // p["block"])
        sf = sf.repeat_interleave(p["block_rows"], dim=0)[:T]          # one scale row per block of rows
        want = oracle_decode(t["q"], p["fmt"], H).reshape(T, H // p["block"], p["block"]) * sf[..., None]
        assert same_bits(y, want.reshape(T, H).to(torch.bfloat16 if p["out"] == "bf16" else torch.float32))
    prop()


def test_topk_gate_reference_vs_stable_sort():
    pkg = registry.op_package("topk_gate")

    @given(_cases("topk_gate"))
    def prop(case):
        s = build_inputs(case)["scores"]
        k = case["params"]["k"]
        (idx,) = reference_outputs(pkg.OP, pkg, {"scores": s}, {"k": k})
        canon = torch.where(s == 0, torch.zeros_like(s), s)        # -0.0 ties +0.0, as a sort compares
        want = torch.sort(canon, dim=1, descending=True, stable=True).indices[:, :k]
        assert torch.equal(idx, want)
    prop()


def _pow2_scales(amax):
    e = torch.ceil(torch.log2(amax.double() / 448.0))
    return torch.exp2(e).float(), torch.exp2(-e).float()


def _ue8m0_words(sf):
    """Exponent bytes of power-of-two scales, four consecutive ones of the last dim per int32."""
    byte = (torch.log2(sf.double()).round() + 127).to(torch.int64)
    byte = torch.nn.functional.pad(byte, (0, (-byte.shape[-1]) % 4))
    w = byte[..., 0::4] | (byte[..., 1::4] << 8) | (byte[..., 2::4] << 16) | (byte[..., 3::4] << 24)
    return torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)


def oracle_block_scales(x, rows, cols, scale, amax_floor=1e-4):
    """One scale per rows x cols block, from a zero-padded copy (zero never wins an absolute max), the
    block's amax floored at amax_floor (in float32)."""
    T, H = x.shape
    nb = -(-T // rows)
    xp = torch.zeros(nb * rows, H)
    xp[:T] = x.float()
    amax = xp.reshape(nb, rows, H // cols, cols).abs().amax(dim=(1, 3)).clamp(min=_f32(amax_floor))
    if scale == "fp32":
        return amax / 448.0, torch.full_like(amax, 448.0) / amax
    return _pow2_scales(amax)


def _cast(v):
    return v.clamp(-448, 448).to(torch.float8_e4m3fn)


def test_per_block_cast_reference_vs_torch_float8():
    pkg = registry.op_package("per_block_cast")

    @given(_cases("per_block_cast"))
    def prop(case):
        x = build_inputs(case)["x"]
        p = case["params"]
        rows, cols = p["block_rows"], p["block_cols"]
        q, sf = reference_outputs(pkg.OP, pkg, {"x": x}, p)
        osf, inv = oracle_block_scales(x, rows, cols, p["scale"], p["amax_floor"])
        full = inv.repeat_interleave(rows, 0)[:x.shape[0]].repeat_interleave(cols, 1)
        assert same_bits(q, _cast(x.float() * full))
        assert same_bits(sf, _ue8m0_words(osf) if p["scale"] == "ue8m0" else osf)
    prop()


def test_per_channel_cast_reference_vs_torch_float8():
    pkg = registry.op_package("per_channel_cast")

    @given(_cases("per_channel_cast"))
    def prop(case):
        x = build_inputs(case)["x"]
        p = case["params"]
        rows = p["group_tokens"]
        q, sf = reference_outputs(pkg.OP, pkg, {"x": x}, p)
        osf, inv = oracle_block_scales(x, rows, 1, p["scale"], p["amax_floor"])
        oq = _cast(x.float() * inv.repeat_interleave(rows, 0)[:x.shape[0]])
        assert same_bits(q, oq.T.contiguous() if p["transpose"] else oq)
        assert same_bits(sf, _ue8m0_words(osf) if p["scale"] == "ue8m0" else osf)
    prop()


def test_per_block_cast_modes_agree_with_the_full_cast():
    """Scales alone equal the full cast's scales; casting with those (fp32) scales reproduces q where
    1 / sf equals the full cast's multiplier, which a float32 division does not promise: compare with
    the oracle of the given scales instead."""
    full, only, given_ = (registry.op_package(n) for n in
                          ("per_block_cast", "per_block_cast_with_sf_only", "per_block_cast_with_precomputed_sf"))

    @given(_cases("per_block_cast_with_sf_only"))
    def prop(case):
        x = build_inputs(case)["x"]
        p = case["params"]
        (sf,) = reference_outputs(only.OP, only, {"x": x}, p)
        assert same_bits(sf, reference_outputs(full.OP, full, {"x": x}, p)[1])
        if p["scale"] == "ue8m0":
            return
        sp = {k: p[k] for k in ("fmt", "block_rows", "block_cols")}
        (q,) = reference_outputs(given_.OP, given_, {"x": x, "sf": sf}, sp)
        inv = (torch.ones_like(sf) / sf).repeat_interleave(p["block_rows"], 0)[:x.shape[0]]
        assert same_bits(q, _cast(x.float() * inv.repeat_interleave(p["block_cols"], 1)))
    prop()


def test_swiglu_per_channel_cast_is_the_swiglu_then_the_channel_cast():
    """The fused reference against its two halves computed apart: torch's SwiGLU in float32 (libm's exp,
    as the kernels call it), rounded to the input dtype by torch, then the per-channel cast oracle."""
    from tkgen.runtime import libm
    pkg = registry.op_package("swiglu_forward_and_per_channel_cast_and_transpose")

    @given(_cases("swiglu_forward_and_per_channel_cast_and_transpose"))
    def prop(case):
        x = build_inputs(case)["x"]
        p = case["params"]
        q, sf = reference_outputs(pkg.OP, pkg, {"x": x}, p)
        a, b = x.float().chunk(2, dim=1)
        if p["clamp"] is not None:
            a, b = a.clamp(max=p["clamp"]), b.clamp(-p["clamp"], p["clamp"])
        act = (a / (1 + libm.expf(-a)) * b).to(x.dtype)
        assume(bool(torch.isfinite(act).all()))   # an overflowing SwiGLU: the property tests hold kernels to it
        osf, inv = oracle_block_scales(act, p["group_tokens"], 1, p["scale"])
        oq = _cast(act.float() * inv.repeat_interleave(p["group_tokens"], 0)[:x.shape[0]])
        assert same_bits(q, oq.T.contiguous() if p["transpose"] else oq)
        assert same_bits(sf, _ue8m0_words(osf) if p["scale"] == "ue8m0" else osf)


def oracle_swiglu_backward(a, b, g, weights, rsf, clamp):
    """Float64 autograd of sum(g * swiglu(a, b) * w) over the forward's definition: a clamped from above
    and b on both sides (torch's clamp passes the gradient where the bound is not exceeded, as the spec's
    strict flags do), act = silu(a) * b, w = weights * rsf. Returns (d/da, d/db, d/dweights, act * w)."""
    a, b = a.double().requires_grad_(), b.double().requires_grad_()
    w = (torch.ones(a.shape[0], dtype=torch.float64) if weights is None else weights.double()).requires_grad_()
    ac, bc = (a, b) if clamp is None else (a.clamp(max=clamp), b.clamp(-clamp, clamp))
    y = torch.nn.functional.silu(ac) * bc * (w * rsf)[:, None]
    (y * g.double()).sum().backward()
    return a.grad, b.grad, w.grad, y.detach()


def test_swiglu_backward_and_per_token_cast_reference_vs_float64_autograd():
    """The reference's outputs against float64 autograd, within bounds that follow from its float32
    evaluation and its final roundings (inputs in the range where float32 neither overflows nor loses
    exp(-a) to infinity; the property tests hold the kernels to the reference at the extremes):
    - x_grad, act_out: bf16 rounding (2^-9 relative, 2^-8 stated) plus 2^-16 of the magnitudes of the
      terms (float32 errors are a few ulp of them, 32 at most through 1 - s);
    - scales: from the largest |dx| of the group within that error, amax / 448 (fp32) or the power of
      two that holds it (pow2, ue8m0); codes: decode(q) * sf within half an e4m3 step of dx (2^-4
      relative, or 2^-10 * sf among subnormals) plus twice the error of dx;
    - weight_grad: a float32 sum of H terms, within (H + 8) * 2^-24 of the sum of their magnitudes."""
    pkg = registry.op_package("swiglu_backward_and_per_token_cast")

    @settings(max_examples=20)
    @given(_cases("swiglu_backward_and_per_token_cast"))
    def prop(case):
        d, p, r = case["dims"], case["params"], case["inputs"]
        T, H, group = d["T"], d["H"], p["group"]
        gen = torch.Generator().manual_seed(r["q"]["seed"])
        x = torch.randn(T, 2 * H, generator=gen) * 3 * 2.0 ** int(torch.randint(-8, 3, (), generator=gen))
        xg = x.reshape(T, 2 * H // group, group)
        sf = xg.abs().amax(-1).clamp(min=1e-4) / 448
        q = (xg / sf[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(T, 2 * H)
        g_dtype = torch.bfloat16 if r["act_x_grad"]["dtype"] == "bf16" else torch.float32
        g = (torch.randn(T, H, generator=gen) * 2.0 ** int(torch.randint(-12, 13, (), generator=gen))).to(g_dtype)
        weights = None if r["weights"] is None else torch.rand(T, generator=gen)
        rsf, clamp = p["routed_scaling_factor"], p["clamp"]
        tensors = {"q": q, "sf": sf.reshape(T, 2 * H // group), "act_x_grad": g, "weights": weights}
        x_grad, q_out, sf_out, weight_grad, act_out = reference_outputs(pkg.OP, pkg, tensors, p)

        # the input as the spec defines it: each code times its scale in float32, then exact in float64
        xa = (q.float().reshape(T, 2 * H // group, group) * sf[..., None]).reshape(T, 2 * H)
        a, b = xa[:, :H], xa[:, H:]
        da, db, dw, y = oracle_swiglu_backward(a, b, g, weights, rsf, clamp)
        dx = torch.cat([da, db], 1)
        w64 = (torch.ones(T, dtype=torch.float64) if weights is None else weights.double()) * rsf
        ac = a.double() if clamp is None else a.double().clamp(max=clamp)
        bc = b.double() if clamp is None else b.double().clamp(-clamp, clamp)
        terms = (g.double() * w64[:, None]).abs() * (bc.abs() * (1 + ac.abs()) + ac.abs())
        err = torch.cat([terms, terms], 1) * 2.0 ** -16 + 2.0 ** -126
        assert bool(((x_grad.double() - dx).abs() <= 2.0 ** -8 * dx.abs() + err).all())

        act = ac * torch.sigmoid(ac) * bc
        if p["recompute"]:
            bound = 2.0 ** -8 * y.abs() + 2.0 ** -16 * (ac * bc * w64[:, None]).abs() + 2.0 ** -126
            assert bool(((act_out.double() - y).abs() <= bound).all())
            # and it is the forward op's output, bit for bit, on the clamped float32 input and weight
            fwd = registry.op_package("swiglu_forward")
            xc = xa if clamp is None else torch.cat([a.clamp(max=clamp), b.clamp(-clamp, clamp)], 1)
            wf = (torch.ones(T) if weights is None else weights) * torch.tensor(rsf, dtype=torch.float32)
            out = reference_outputs(fwd.OP, fwd, {"x": xc, "weights": wf}, {"fmt": "bf16"})[0]   # and clamped_count
            assert same_bits(act_out, out)
        else:
            assert act_out.numel() == 0
        if weights is None:
            assert weight_grad.numel() == 0
        else:
            s = (g.double() * act).abs().sum(1) * rsf
            assert bool(((weight_grad.double() - dw).abs() <= (H + 8) * 2.0 ** -24 * s + 2.0 ** -16 * s + 2.0 ** -126).all())

        G = 2 * H // group
        dxg, errg = dx.reshape(T, G, group), err.reshape(T, G, group)
        amax = dxg.abs().amax(-1).clamp(min=torch.tensor(1e-4, dtype=torch.float32).item())
        aerr = errg.amax(-1)
        sf_got = sf_out.contiguous()
        if p["scale"] == "ue8m0":
            by = sf_got.view(torch.uint8).reshape(T, 4 * sf_got.shape[1])[:, :G].to(torch.int64)
            sf_got = torch.exp2(by.double() - 127)
        sf_got = sf_got.double().reshape(T, G)
        if p["scale"] == "fp32":
            assert bool(((sf_got - amax / 448).abs() <= (aerr + 2.0 ** -22 * amax) / 448).all())
        else:   # the power of two that holds amax / 448
            assert bool(((amax - aerr) / 448 <= sf_got * (1 + 2.0 ** -22)).all())
            assert bool((sf_got / 2 < (amax + aerr) / 448 * (1 + 2.0 ** -22)).all())
        deq = q_out.double().reshape(T, G, group) * sf_got[..., None]
        bound = 2.0 ** -4 * dxg.abs() * (1 + 2.0 ** -20) + 2.0 ** -10 * sf_got[..., None] + 2 * errg
        assert bool(((deq - dxg).abs() <= bound).all())


def _scale_exponents(sf, scale, G):
    """The biased exponent field of each input scale, read from the container's bytes: [T, G] int64."""
    if scale == "fp32":
        return (sf.view(torch.int32).to(torch.int64) >> 23) & 0xFF
    b = sf.contiguous().view(torch.uint8).to(torch.int64).reshape(sf.shape[0], sf.shape[1] * sf.element_size())
    return b[:, :G]


def test_per_block_cast_lossless_reference_vs_float64_exponents():
    """e_out = max(largest exponent of the block's rows - 6, 0) over its 1 x in_cols input blocks, out =
    e4m3(q * 2^(e_in - e_out)) with the product in float64 (exact), out_sf = 2^(e_out - 127), from ml_dtypes'
    FP4 table and torch's cast."""
    pkg = registry.op_package("per_block_cast_lossless")

    @given(_cases("per_block_cast_lossless"))
    def prop(case):
        t = build_inputs(case)
        p = case["params"]
        T, H = case["dims"]["T"], case["dims"]["H"]
        rows, cols, c = p["block_rows"], p["block_cols"], p["in_cols"]
        out, out_sf = reference_outputs(pkg.OP, pkg, t, p)
        e = _scale_exponents(t["sf"], p["in_scale"], H // c)
        nb = -(-T // rows)
        ep = torch.full((nb * rows, H // c), -1, dtype=torch.int64)     # padding rows never win the max
        ep[:T] = e
        e_out = (ep.reshape(nb, rows, H // cols, cols // c).amax(dim=(1, 3)) - 6).clamp(min=0)
        n = e - e_out.repeat_interleave(rows, 0)[:T].repeat_interleave(cols // c, 1)
        q = oracle_decode(t["q"], "e2m1", H).double()
        assert same_bits(out, _cast((q * torch.exp2(n.double()).repeat_interleave(c, 1)).float()))
        sf = torch.exp2(e_out.double() - 127).float()
        want = {"fp32": sf, "ue8m0_byte": e_out.to(torch.uint8), "ue8m0": _ue8m0_words(sf)}[p["scale"]]
        assert same_bits(out_sf, want)
    prop()


def _for_drawn_cases(name, check):
    """check(case, inputs, params, reference outputs) on the cases of op `name`'s strategy."""
    pkg = registry.op_package(name)

    @given(_cases(name))
    def prop(case):
        t = build_inputs(case)
        check(case, t, case["params"], reference_outputs(pkg.OP, pkg, t, case["params"]))
    prop()


@pytest.mark.parametrize("name", ["batched_transpose", "transpose_2d"])
def test_transpose_references_are_bitwise_transposes(name):
    def check(case, t, p, outs):
        want = t["x"].transpose(-2, -1).clone(memory_format=torch.contiguous_format)
        assert torch.equal(outs[0].view(torch.uint8), want.view(torch.uint8))     # NaN payloads too
    _for_drawn_cases(name, check)


def test_cast_reference_vs_torch_conversions():
    """y = x.to(dtype), into e4m3 through torch's cast of x clamped to ±448 (TileKernels' own oracle)."""
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}

    def check(case, t, p, outs):
        x, dt = t["x"], dtypes[p["dtype"]]
        assert same_bits(outs[0], x.float().clamp(-448.0, 448.0).to(dt) if dt == torch.float8_e4m3fn else x.to(dt))
    _for_drawn_cases("elementwise_cast", check)


def test_unpack_from_e2m1fn_x2_reference_vs_ml_dtypes():
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn,
              "e5m2": torch.float8_e5m2}

    def check(case, t, p, outs):
        assert same_bits(outs[0], oracle_decode(t["q"], "e2m1", case["dims"]["H"]).to(dtypes[p["out"]]))
    _for_drawn_cases("unpack_from_e2m1fn_x2", check)


def test_per_channel_cast_from_fp8_reference_vs_torch_float8():
    """v = q * sf_in, per-channel scales over row groups from a zero-padded copy, out = e4m3(v * inv); out_sf
    in TileKernels' layouts (its transpose): float32 [row groups, H], or four row groups' UE8M0 bytes per int32."""
    def check(case, t, p, outs):
        out, out_sf = outs
        T, H = case["dims"]["T"], case["dims"]["H"]
        if t["q"].dtype != torch.float8_e4m3fn and t.get("sf") is not None:
            return      # plain values with scales: no TileKernels case (bf16's max times a scale overflows)
        v = t["q"].float()                                  # a plain bf16 or fp32 input without sf
        if t.get("sf") is not None:
            v = v * _input_scales(t["sf"], p["in_scale"], H // p["in_group"]).repeat_interleave(p["in_group"], 1)
        osf, inv = oracle_block_scales(v, p["group_tokens"], 1, "fp32" if p["scale"] == "fp32" else "pow2",
                                       p["amax_floor"])
        assert same_bits(out, _cast(v * inv.repeat_interleave(p["group_tokens"], 0)[:T]))
        want = _ue8m0_words(osf.T).T if p["scale"] == "ue8m0" else osf          # [ceil(groups / 4), H] words
        assert same_bits(out_sf.T, want)
    _for_drawn_cases("per_channel_cast_from_fp8", check)


def test_transpose_weight_sf_reference_vs_exponent_bytes():
    """sf0 [NB * block, KB] and sf1 [KB * block, NB]: the exponent field of each scale's float32 bits
    (sign ignored), replicated over the block's weight rows (columns), four per int32 along the last dim
    (little-endian, bytes past the end 0), stored column-major (strides (1, rows))."""
    def pack(e):                                    # int64 bytes [R, C] -> int32 words [R, ceil(C / 4)]
        R, C = e.shape
        p = torch.zeros(R, -(-C // 4) * 4, dtype=torch.int64)
        p[:, :C] = e
        q = p.view(R, -(-C // 4), 4)
        w = q[..., 0] | q[..., 1] << 8 | q[..., 2] << 16 | q[..., 3] << 24
        return torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)

    def check(case, t, p, outs):
        B = p["block"]
        e = (t["sf"].view(torch.int32).to(torch.int64) >> 23) & 0xFF
        for got, want in zip(outs, (pack(e).repeat_interleave(B, 0), pack(e.T).repeat_interleave(B, 0))):
            assert same_bits(got, want)
            assert got.stride() == (1, got.shape[0]) or got.numel() <= 1
    _for_drawn_cases("transpose_weight_sf", check)
