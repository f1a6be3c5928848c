"""cast_back(per_token_cast(x)) stays within each format's error bound, and per_token_cast_and_cast_back is
that composition. Checked on the generated references (no compiles) over drawn inputs, and once end to
end through `tkgen.ops` on the CPU kernels for the packed formats."""
import importlib

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tkgen.ops as ops
from tkgen import registry

FORMATS = ["e4m3", "e5m2", "e2m1", "e5m6"]


def _ref(op, variant):
    return importlib.import_module(registry.op_package(op).__name__ + ".reference").VARIANTS[variant]


def bound(catalog, fmt, x, sf):
    """|cast_back(q) - x| for one element: half a step of the format at the scaled magnitude (a whole
    smallest-subnormal step for e5m6, whose carry below fp16's normal range is not a rounding), times sf."""
    f = catalog.element(fmt)
    scaled = (x.abs() / sf).double()
    e = torch.floor(torch.log2(scaled.clamp(min=2.0 ** f.emin)))
    half_ulp = torch.exp2(e - f.mantissa_bits - 1)
    tiny = 2.0 ** (f.emin - f.mantissa_bits) * (1.0 if f.rounding == "truncate_carry" else 0.5)
    return (torch.maximum(half_ulp, torch.full_like(half_ulp, tiny)) * sf.double()).float()


@settings(max_examples=30)
@given(fmt=st.sampled_from(FORMATS), scale=st.sampled_from(["fp32", "pow2"]), group=st.sampled_from([32, 64]),
       rows=st.integers(0, 6), seed=st.integers(0, 2 ** 31 - 1), mag=st.integers(-30, 30))
def test_roundtrip_within_format_error(catalog, fmt, scale, group, rows, seed, mag):
    g = torch.Generator().manual_seed(seed)
    H = 128
    x = torch.randn(rows, H, generator=g) * torch.exp2(torch.randint(-8, 8, (rows, H), generator=g).float()) * 2.0 ** mag
    q, sf = _ref("per_token_cast", f"{fmt}_{scale}_row")(x, group, 0.0)      # amax_floor 0: the format's floor
    y, = _ref("cast_back", f"{fmt}_fp32_fp32")(q, sf, group, 1)
    sfe = sf.repeat_interleave(group, dim=1)
    err = (y - x).abs()
    assert bool((err <= bound(catalog, fmt, x, sfe)).all()), float((err / bound(catalog, fmt, x, sfe)).max())
    # the fused op is exactly that composition
    fused, = _ref("per_token_cast_and_cast_back", f"{fmt}_{scale}_fp32")(x, group, 0.0)
    assert torch.equal(fused.view(torch.int32), y.view(torch.int32))


def test_ops_roundtrip_on_cpu_kernels_for_packed_formats(catalog):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(9, 256, generator=g) * 3).to(torch.bfloat16)
    for fmt, scale in (("e2m1", "ue8m0"), ("e5m6", "pow2")):
        q, sf = ops.per_token_cast(x, fmt=fmt, group=64, scale=scale)
        assert q.shape == ((9, 128) if fmt == "e2m1" else (9, 384))
        y = ops.cast_back(q, sf, fmt, 64, scale="ue8m0" if scale == "ue8m0" else "fp32", out="fp32")
        scales = (torch.exp2(sf.view(torch.uint8).to(torch.float32).reshape(9, -1)[:, :4] - 127)
                  if scale == "ue8m0" else sf)
        err = (y - x.float()).abs()
        assert bool((err <= bound(catalog, fmt, x.float(), scales.repeat_interleave(64, dim=1))).all())
