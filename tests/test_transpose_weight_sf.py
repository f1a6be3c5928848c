"""tkgen.compat.tilekernels.quant.batched_transpose_weight_sf (TileKernels 2.1.0, operators-v2.md 2.12),
built from the generated op `transpose_weight_sf`, against an independent plain-PyTorch reading of the
section: each scale's exponent field as a byte, four bytes packed little-endian per int32 (bytes past the
last block 0), each packed row replicated to its B weight rows; MN-major strides; outs rewritten in place;
a scale that is not a positive power of two refused (ValueError naming sf_list)."""
import pytest
import torch

import tkgen.compat.tilekernels as tk

FN = tk.quant.batched_transpose_weight_sf


def pow2_sf(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return 2.0 ** torch.randint(-20, 20, shape, generator=g).float()


def pack_rows(e):
    """e int64 bytes [G, R, C] -> int32 words [G, R, ceil(C / 4)], byte j of word w = e[..., 4w + j] (0 past C)."""
    G, R, C = e.shape
    W = -(-C // 4)
    padded = torch.zeros(G, R, 4 * W, dtype=torch.int64)
    padded[:, :, :C] = e
    q = padded.view(G, R, W, 4)
    words = q[..., 0] | (q[..., 1] << 8) | (q[..., 2] << 16) | (q[..., 3] << 24)
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)


def oracle(sf, B, transpose_sf1):
    s = sf[None] if sf.dim() == 2 else sf
    e = (s.view(torch.int32).to(torch.int64) >> 23) & 0xFF          # the exponent field of each scale
    sf0 = pack_rows(e).repeat_interleave(B, dim=1)                    # [G, n, ceil(k_b / 4)]
    sf1 = pack_rows(e.transpose(1, 2)).repeat_interleave(B, dim=1)    # [G, k, ceil(n_b / 4)]
    if transpose_sf1:
        sf1 = sf1.transpose(1, 2)
    return (sf0[0], sf1[0]) if sf.dim() == 2 else (sf0, sf1)


def want_strides(sf, B, transpose_sf1):
    nb, kb = sf.shape[-2:]
    n, k, w0, w1 = nb * B, kb * B, -(-kb // 4), -(-nb // 4)
    s0, s1 = (1, n), ((k, 1) if transpose_sf1 else (1, k))
    if sf.dim() == 3:
        return (n * w0, *s0), (k * w1, *s1)
    return s0, s1


# (n, k, groups or None, transpose_sf1) per weight; n_b and k_b not multiples of 4 give partial words
WEIGHTS = {128: [(256, 384, None, False), (384, 640, 2, True), (512, 128, None, True), (384, 384, 3, False)],
           32: [(128, 256, None, True), (256, 128, 3, False), (128, 128, 2, True)]}


def make(B, seed=0):
    sfs, flags = [], []
    for i, (n, k, groups, t) in enumerate(WEIGHTS[B]):
        shape = (n // B, k // B) if groups is None else (groups, n // B, k // B)
        sfs.append(pow2_sf(shape, seed + i))
        flags.append(t)
    return sfs, flags


def check(pairs, sfs, flags, B):
    assert isinstance(pairs, list) and len(pairs) == len(sfs)
    for (sf0, sf1), sf, t in zip(pairs, sfs, flags):
        w0, w1 = oracle(sf, B, t)
        s0, s1 = want_strides(sf, B, t)
        assert sf0.dtype == sf1.dtype == torch.int32
        assert sf0.shape == w0.shape and sf1.shape == w1.shape
        assert sf0.stride() == s0 and sf1.stride() == s1
        assert torch.equal(sf0, w0) and torch.equal(sf1, w1)


@pytest.mark.parametrize("B", [32, 128])
def test_matches_the_section_bitwise_with_strides(B):
    sfs, flags = make(B)
    check(FN(sfs, B, flags, [None] * len(sfs)), sfs, flags, B)


@pytest.mark.parametrize("B", [32, 128])
def test_outs_are_rewritten_in_place(B):
    sfs, flags = make(B)
    first = FN(sfs, B, flags, [None] * len(sfs))
    for sf0, sf1 in first[1:]:
        sf0.fill_(-1)                                  # poison: every word must be written again
        sf1.fill_(-1)
    new = make(B, seed=100)[0]
    outs = [None] + first[1:]
    again = FN(new, B, flags, outs)
    check(again, new, flags, B)
    for (a0, a1), (o0, o1) in zip(again[1:], first[1:]):
        assert a0.data_ptr() == o0.data_ptr() and a1.data_ptr() == o1.data_ptr()


def test_empty_list():
    assert FN([], 128, [], []) == []


@pytest.mark.parametrize("bad", [1.5, -2.0, 0.0, 3.0, float("inf"), float("nan"), 2.0 ** -130])
def test_not_a_power_of_two_is_refused(bad):
    sfs, flags = make(128)
    sfs[1] = sfs[1].clone()
    sfs[1][0, 0, 1] = bad
    with pytest.raises(ValueError, match=r"`sf_list\[1\]` must hold positive powers of two"):
        FN(sfs, 128, flags, [None] * len(sfs))


def test_arguments_are_checked_by_name():
    sf = pow2_sf((2, 3), 0)
    with pytest.raises(ValueError, match="`block_size`"):
        FN([sf], 64, [False], [None])
    with pytest.raises(ValueError, match="`transpose_sf1s`"):
        FN([sf], 128, [], [None])
    with pytest.raises(ValueError, match="`outs`"):
        FN([sf], 128, [False], [])
    with pytest.raises(TypeError, match=r"`sf_list\[0\]`"):
        FN([sf.double()], 128, [False], [None])
    with pytest.raises(ValueError, match=r"`sf_list\[0\]`.*multiples of 128"):
        FN([pow2_sf((3, 3), 0)], 32, [False], [None])                  # n = 96
    with pytest.raises(ValueError, match=r"`sf_list\[0\]` must be contiguous"):
        FN([pow2_sf((3, 2), 0).t()], 128, [False], [None])
    good = FN([sf], 128, [False], [None])[0]
    with pytest.raises(ValueError, match=r"`outs\[0\] \(sf1_out\)` must have shape"):
        FN([sf], 128, [True], [good])                                   # sf1_out laid out for transpose_sf1=False
    with pytest.raises(TypeError, match=r"`outs\[0\]`"):
        FN([sf], 128, [False], [good[0]])
