"""The generated references checked against independent oracles: torch's own float8 cast, a stable sort.

Oracles are written here by hand, per operator, on purpose: they must not share code with tkgen.
"""
import importlib

import torch
from hypothesis import given

from tkgen import registry
from tkgen.testing.check import reference_outputs
from tkgen.testing.inputs import build_inputs


def _cases(name):
    return importlib.import_module(registry.op_package(name).__name__ + ".strategies").cases()


def oracle_per_token_cast(x, fmt, group, scale):
    T, H = x.shape
    xf = x.float().reshape(T, H // group, group)
    amax = xf.abs().amax(-1).clamp(min=1e-4)
    if scale == "fp32":
        sf = amax / 448.0
        inv = torch.full_like(amax, 448.0) / amax         # a true division (not reciprocal times 448)
    else:
        e = torch.ceil(torch.log2(amax.double() / 448.0))  # exact in float64 for these magnitudes
        sf, inv = torch.exp2(e).float(), torch.exp2(-e).float()
    q = (xf * inv[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(T, H)
    if scale == "ue8m0":
        byte = (torch.log2(sf.double()).round() + 127).to(torch.int64)
        pad = (-byte.shape[1]) % 4
        byte = torch.nn.functional.pad(byte, (0, pad))
        words = byte.reshape(T, byte.shape[1] // 4, 4)
        w = words[..., 0] | (words[..., 1] << 8) | (words[..., 2] << 16) | (words[..., 3] << 24)
        sf = torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)
    return q, sf


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.numel() == 0 or torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def test_per_token_cast_reference_vs_torch_float8():
    pkg = registry.op_package("per_token_cast")

    @given(_cases("per_token_cast"))
    def prop(case):
        x = build_inputs(case)["x"]
        p = case["params"]
        q, sf = reference_outputs(pkg.OP, pkg, {"x": x}, p)
        oq, osf = oracle_per_token_cast(x, p["fmt"], p["group"], p["scale"])
        assert same_bits(q, oq)
        assert same_bits(sf, osf)
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


def oracle_block_scales(x, rows, cols, scale):
    """One scale per rows x cols block, from a zero-padded copy (zero never wins an absolute max)."""
    T, H = x.shape
    nb = -(-T // rows)
    xp = torch.zeros(nb * rows, H)
    xp[:T] = x.float()
    amax = xp.reshape(nb, rows, H // cols, cols).abs().amax(dim=(1, 3)).clamp(min=1e-4)
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
        osf, inv = oracle_block_scales(x, rows, cols, p["scale"])
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
        osf, inv = oracle_block_scales(x, rows, 1, p["scale"])
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


def test_batched_transpose_reference_is_a_bitwise_transpose():
    pkg = registry.op_package("batched_transpose")

    @given(_cases("batched_transpose"))
    def prop(case):
        x = build_inputs(case)["x"]
        (out,) = reference_outputs(pkg.OP, pkg, {"x": x}, {})
        assert same_bits(out, x.transpose(1, 2).contiguous())
    prop()
