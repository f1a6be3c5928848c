"""Kernels call the target's math library (exp, log); references call the same functions (on the CPU through
tkgen/runtime/libm.py), so outputs downstream of them are bit-exact. This holds them to it on many values,
wide ranges included, beyond what the property tests draw."""
import math

import torch

from tkgen import registry
from tkgen.runtime import libm
from tkgen.runtime.fastpath import run
from tkgen.testing.check import compare, reference_outputs


def _wide(n, seed):
    """float32 values over the whole range where exp is neither 0 nor inf, plus the edges and specials."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, generator=gen, dtype=torch.float64) * 210 - 105).float()
    edges = torch.tensor([0.0, -0.0, 88.72, -87.33, -103.97, 1e-30, -1e-30, math.inf, -math.inf, math.nan])
    return torch.cat([edges, x])


def test_libm_mirror_is_close_to_float64_exp_and_log():
    """A sanity check of the mirror itself: within one ulp of the float64 functions, with the same infinities
    and NaNs. (Whether it also differs somewhere is the C library's business: a correctly rounded libm
    would make the mirror unnecessary but not wrong.)"""
    x = _wide(1 << 18, 1)
    for mirror, exact, arg in ((libm.expf, torch.exp, x), (libm.logf, torch.log, x.abs())):
        got, want = mirror(arg), exact(arg.double()).float()
        finite = torch.isfinite(want)
        assert torch.equal(torch.isinf(got), torch.isinf(want)) and torch.equal(torch.isnan(got), torch.isnan(want))
        ulp = (got[finite].view(torch.int32).long() - want[finite].view(torch.int32).long()).abs()
        assert int(ulp.max()) <= 1


def test_swiglu_kernels_match_their_references_bit_for_bit_on_many_values():
    x = _wide(2048 * 128 - 10, 3).reshape(2048, 128)      # the edges and specials: gates of row 0
    fwd = registry.op_package("swiglu_forward")
    got = run(fwd.OP, {"x": x}, {"fmt": "fp32"})[0]
    want = reference_outputs(fwd.OP, fwd, {"x": x}, {"fmt": "fp32"})[0]
    compare("out", got, want, "bit")

    bwd = registry.op_package("swiglu_backward")
    gen = torch.Generator().manual_seed(4)
    tensors = {"x": x, "grad_out": torch.randn(2048, 64, generator=gen), "weights": None}
    compare("x_grad", run(bwd.OP, tensors, {})[0], reference_outputs(bwd.OP, bwd, tensors, {})[0], "bit")


def test_swiglu_backward_and_per_token_cast_matches_its_reference_on_many_values():
    """Every output downstream of exp bit for bit on 2^20 elements (weight_grad, a sum, as declared)."""
    pkg = registry.op_package("swiglu_backward_and_per_token_cast")
    gen = torch.Generator().manual_seed(5)
    T, H, group = 4096, 128, 32
    x = (torch.randn(T, 2 * H, generator=gen) * 4).reshape(T, 2 * H // group, group)
    sf = x.abs().amax(-1) / 448
    q = (x / sf[..., None]).to(torch.float8_e4m3fn).reshape(T, 2 * H)
    tensors = {"q": q, "sf": sf, "act_x_grad": torch.randn(T, H, generator=gen), "weights": torch.rand(T, generator=gen)}
    params = {"group": group, "scale": "fp32", "sf_layout": "row", "recompute": True, "routed_scaling_factor": 2.5,
              "clamp": None}
    for o, got, want in zip(pkg.OP.outputs, run(pkg.OP, tensors, params), reference_outputs(pkg.OP, pkg, tensors, params)):
        compare(o.name, got, want, o.exact)


def test_reference_sqrt_is_correctly_rounded():
    """The references' sqrt (and rsqrt's, 1 / sqrt) is the correctly rounded one, as the kernels' sqrtf on
    every target: the float64 root rounded once. torch's own float32 sqrt on the CPU is not (a gate computed
    with it differed from the C kernel's by up to 13 ulp), so the references do not call it."""
    from tkgen.runtime.torch_prims import _rsqrt, _sqrt
    gen = torch.Generator().manual_seed(5)
    x = torch.cat([torch.rand(1 << 16, generator=gen) * 10, torch.exp2(torch.randint(-149, 128, (1 << 12,),
                                                                                     generator=gen).float()),
                   torch.tensor([0.0, -0.0, math.inf, 1e-45, 3.4e38])])
    want = torch.tensor([math.sqrt(v) for v in x.tolist()], dtype=torch.float64).float()
    assert torch.equal(_sqrt(x).view(torch.int32), want.view(torch.int32))
    assert torch.equal(_rsqrt(x).view(torch.int32), (1 / want).view(torch.int32))
