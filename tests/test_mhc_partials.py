"""mhc_reduce_partials_and_rmsnorm, TileKernels 2.1.0's pre-norm projection from split-K partials, and its
backward: bit for bit against the ordered sums written out here, gradients against float64 autograd, and
the partials of a split K giving mhc_pre_norm_fn's mixes."""
import pytest
import torch

import tkgen.ops as ops

GEN = torch.Generator().manual_seed(21)


def rand(*shape, scale=1.0):
    return torch.randn(*shape, generator=GEN) * scale


def ordered_sum(x, dim):
    """From +0.0, the slices along `dim` added in order, each sum rounded to float32."""
    acc = torch.zeros_like(x.select(dim, 0))
    for i in range(x.shape[dim]):
        acc = acc + x.select(dim, i)
    return acc


def same_bits(a, b):
    assert a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.mark.parametrize("splits, groups", [(1, 1), (3, 2), (16, 1)])
def test_forward_is_the_ordered_sums_bit_for_bit(splits, groups):
    t, n, gs, eps = 9, 24, 640, 1e-6
    oms, sqs = rand(splits, t, groups, n), rand(splits, t, groups).abs() * 100
    sqs[0, 1] = -0.0
    out, out_mul, sqrsum = ops.mhc_reduce_partials_and_rmsnorm(oms, sqs, splits, gs, eps)
    want_om, want_sq = ordered_sum(oms, 0), ordered_sum(sqs, 0)
    same_bits(out_mul, want_om)
    same_bits(sqrsum, want_sq)
    rstd = torch.rsqrt(want_sq / gs + torch.tensor(eps, dtype=torch.float32))
    same_bits(out, ordered_sum(want_om * rstd[..., None], 1))


def test_gradients_against_float64_autograd():
    splits, t, groups, n, gs, eps = 4, 7, 2, 24, 96, 1e-2
    oms = rand(splits, t, groups, n).requires_grad_(True)
    sqs = (rand(splits, t, groups).abs() * 10).requires_grad_(True)
    g = rand(t, n)
    out = ops.mhc_reduce_partials_and_rmsnorm(oms, sqs, splits, gs, eps)[0]
    got = torch.autograd.grad(out, [oms, sqs], g)
    o64, s64 = oms.detach().double().requires_grad_(True), sqs.detach().double().requires_grad_(True)
    want_out = (o64.sum(0) * torch.rsqrt(s64.sum(0) / gs + eps)[..., None]).sum(1)
    want = torch.autograd.grad(want_out, [o64, s64], g.double())
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))


def test_the_partials_of_a_split_k_give_mhc_pre_norm_fn():
    """2.1.0's reference builds the partials by splitting K: each split's products' sum and squares."""
    t, k, n, splits, eps = 11, 256, 24, 4, 1e-6
    r, fn = rand(t, k).to(torch.bfloat16), rand(n, k, scale=0.05)
    mixes, out_mul, sqrsum = ops.mhc_pre_norm_fn(r, fn, None, eps=eps)
    f = ((fn.view(torch.int32) + 0x1000) & -8192).view(torch.float32)       # the op's TF32 rounding
    chunks = [slice(i * k // splits, (i + 1) * k // splits) for i in range(splits)]
    rf = r.float()
    oms = torch.stack([(rf[:, c] @ f[:, c].T)[:, None, :] for c in chunks])
    sqs = torch.stack([(rf[:, c] * rf[:, c]).sum(-1, keepdim=True) for c in chunks])
    out, om, sq = ops.mhc_reduce_partials_and_rmsnorm(oms, sqs, splits, k, eps)
    torch.testing.assert_close(out, mixes, rtol=1e-5, atol=1e-6 * float(mixes.abs().max()))
    torch.testing.assert_close(om[:, 0], out_mul, rtol=1e-5, atol=1e-6 * float(out_mul.abs().max()))
    torch.testing.assert_close(sq[:, 0], sqrsum, rtol=1e-5, atol=0.0)
