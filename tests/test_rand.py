"""`tkgen.compat.tilekernels.rand` (TileKernels 2.1.0's `rand`): randn is torch.randn, set_seed seeds torch
and the seed counter, reserve_seed hands out the mixed counter and moves it on. Moments on 2^20 samples
(TileKernels' bounds: |mean| < 0.02, |std - 1| < 0.02, |P(x > 0) - 0.5| < 0.02)."""
import importlib

import numpy as np
import pytest
import torch

import tkgen.compat.tilekernels as tk
from tkgen.compat.tilekernels import rand


def mixed(seed):
    """The counter's mix, in numpy uint32 arithmetic (wrapping)."""
    u = np.uint32
    with np.errstate(over="ignore"):
        h = u(seed & 0xFFFFFFFF) + u(0x9E3779B9)
        h ^= h >> u(16)
        h *= u(0x21F0AAAD)
        h ^= h >> u(15)
        h *= u(0x735A2D97)
        h ^= h >> u(15)
    return int(h)


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.view(torch.uint8) if a.numel() else a, b.view(torch.uint8) if b.numel() else b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_set_seed_reproduces_torch_randn(dtype):
    tk.rand.set_seed(42)
    a, b = rand.randn(1000, 3, dtype=dtype), rand.randn_like(torch.empty(7, 5, dtype=dtype))
    torch.manual_seed(42)
    same_bits(a, torch.randn(1000, 3, dtype=dtype))
    same_bits(b, torch.randn(7, 5, dtype=dtype))
    tk.rand.set_seed(42)
    same_bits(rand.randn((1000, 3), dtype=dtype), a)           # a size as a tuple too
    tk.rand.set_seed(43)
    assert not torch.equal(rand.randn(1000, 3, dtype=dtype), a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moments_of_a_million_samples(dtype):
    tk.rand.set_seed(70233673775)
    x = rand.randn(1 << 20, dtype=dtype).double()
    assert abs(float(x.mean())) < 0.02
    assert abs(float(x.std()) - 1) < 0.02
    assert abs(float((x > 0).double().mean()) - 0.5) < 0.02


@pytest.mark.parametrize("shape", [(), (0,), (1,), (7, 13, 3), (3, 0, 5), (1, 1, 1, 1, 5)])
def test_odd_shapes(shape):
    tk.rand.set_seed(1)
    x = rand.randn(shape)
    assert x.shape == shape and x.dtype == torch.float32
    if shape:
        assert rand.randn(*shape).shape == shape
    assert rand.randn_like(x).shape == shape and bool(torch.isfinite(x).all())


def test_reserve_seed_mixes_the_counter_and_moves_it_on():
    tk.rand.set_seed(42)
    assert [rand.reserve_seed(n) for n in (3, 1, 0, 5)] == [mixed(42), mixed(45), mixed(46), mixed(46)]
    assert rand.reserve_seed(1) == mixed(51)
    tk.rand.set_seed(2 ** 40 + 7)                                 # 64-bit seeds: the mix takes 32 bits
    assert rand.reserve_seed(1) == mixed(2 ** 40 + 7) == mixed(7)
    assert mixed(0) == rand.mix(0) != rand.mix(1)


def test_the_counter_starts_at_torchs_initial_seed():
    torch.manual_seed(1234)
    importlib.reload(rand)
    assert rand.reserve_seed(2) == mixed(1234) and rand.reserve_seed(0) == mixed(1236)
    from tkgen.compat.tilekernels.rand import randn                # the module imports by name
    assert randn is rand.randn and tk.rand is rand
