"""TileKernels 2.1.0's mega_moe_sf of norm_forward_and_per_token_cast (issue 28): a second copy of the UE8M0
exponent bytes in the layout of DeepGEMM's mega-MoE scale buffer (operators-v2.md section 2.5), checked bit for
bit on the CPU against a placement written here from the document: the bytes of the scales the call returns,
put at row rho(t) by the row map, every other byte of the buffer (pre-filled with -1) untouched."""
from __future__ import annotations

import pytest
import torch

import tkgen.compat.tilekernels as tk

FN = "quant.norm_forward_and_per_token_cast"


def padded_rows(tokens, block_m):
    """ceil(T / bm) chunks of align(bm, 128) rows."""
    return -(-tokens // block_m) * (-(-block_m // 128) * 128)


def row_of(t, block_m):
    """operators-v2.md 2.5: i = t mod bm; rho = floor(t/bm)*align(bm,128) + floor(i/128)*128 + (i mod 32)*4
    + floor((i mod 128)/32)."""
    i = t % block_m
    return t // block_m * (-(-block_m // 128) * 128) + i // 128 * 128 + i % 32 * 4 + i % 128 // 32


def ue8m0_bytes(sf, tokens, groups):
    """uint8 [T, H / 32]: the exponent byte of each 32-channel scale, from the scales the call returned
    (float32 powers of two, or packed UE8M0 words in either layout)."""
    if sf.dtype == torch.float32:
        return ((sf.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    return sf.contiguous().view(torch.uint8).reshape(tokens, -1)[:, :groups]


def mega_buffer(tokens, words, rows):
    """An int32 [T, H / 128] M-major view (stride(0) == 1, stride(1) == rows) of a buffer of -1."""
    store = torch.full((words, rows), -1, dtype=torch.int32)
    return store, store.T[:tokens]


def expected_buffer(store, sf_bytes, block_m):
    """The buffer's bytes with token t's group c at row rho(t), word c // 4, byte c % 4."""
    words, rows = store.shape
    want = store.clone().view(torch.uint8).reshape(-1)
    tokens, groups = sf_bytes.shape
    t = torch.arange(tokens).unsqueeze(1)
    c = torch.arange(groups).unsqueeze(0)
    addr = 4 * (row_of(t, block_m) + c // 4 * rows) + c % 4
    want[addr.reshape(-1)] = sf_bytes.reshape(-1)
    return want.view(torch.int32).reshape(words, rows)


CASES = [  # (T, H, block_m, packed, col_major_sf, extra rows, residual)
    (389, 512, 192, True, False, 0, False),       # T not a multiple of bm, last chunk partial
    (100, 128, 192, False, False, 5, True),       # T < 128, one word per token, float32 scales
    (300, 7168, 128, True, True, 0, False),       # DeepSeek's hidden size, bm = 128: no padding inside chunks
    (257, 512, 64, False, False, 3, False),       # bm = 64: half of each 128-row chunk is padding
    (45, 256, 200, True, False, 0, True),         # bm = 200: a chunk of two 128-row tiles, T < bm
]


@pytest.mark.parametrize("tokens, hidden, block_m, packed, col_major, extra, with_residual", CASES)
def test_mega_moe_sf_bits(tokens, hidden, block_m, packed, col_major, extra, with_residual):
    gen = torch.Generator().manual_seed(tokens * 7 + hidden)
    x = torch.randn(tokens, hidden, generator=gen).mul_(3.0).to(torch.bfloat16)
    x[0].mul_(1e-30)          # tiny scales: the floor's exponent
    w = torch.randn(hidden, generator=gen).to(torch.bfloat16)
    r = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16) if with_residual else None
    words, rows = hidden // 128, padded_rows(tokens, block_m) + extra
    store, mega = mega_buffer(tokens, words, rows)
    kw = dict(residual=r, use_tma_aligned_col_major_sf=col_major, round_sf=True, use_packed_ue8m0=packed)
    (q, sf), _, _, _ = tk.quant.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, mega_moe_sf=mega,
                                                                 mega_moe_block_m=block_m, **kw)
    (q0, sf0), _, _, _ = tk.quant.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, **kw)
    # the usual outputs are those of a call without the buffer
    assert torch.equal(q.view(torch.uint8), q0.view(torch.uint8))
    assert sf.dtype == sf0.dtype and sf.stride() == sf0.stride()
    assert torch.equal(sf.contiguous().view(torch.uint8), sf0.contiguous().view(torch.uint8))
    want = expected_buffer(torch.full_like(store, -1), ue8m0_bytes(sf, tokens, hidden // 32), block_m)
    bad = (store != want).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} words differ, first (word, row) {bad[0].tolist()}"
    # the padding rows, and the rows past the chunks, still hold -1
    used = torch.zeros(rows, dtype=torch.bool)
    used[row_of(torch.arange(tokens), block_m)] = True
    assert bool((store[:, ~used] == -1).all())
    assert int(used.sum()) == tokens


def test_mega_moe_sf_view_at_an_offset():
    """A buffer that starts inside a larger allocation: the words before and after it keep their bits."""
    tokens, hidden, block_m = 130, 256, 192
    words, rows = hidden // 128, padded_rows(tokens, block_m)
    arena = torch.full((37 + words * rows + 11,), -1, dtype=torch.int32)
    store = arena[37:37 + words * rows].view(words, rows)
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    (q, sf), _, _, _ = tk.quant.norm_forward_and_per_token_cast(x, None, 1e-6, "e4m3", 32, round_sf=True,
                                                                 use_packed_ue8m0=True, mega_moe_sf=store.T[:tokens],
                                                                 mega_moe_block_m=block_m)
    want = expected_buffer(torch.full_like(store, -1), ue8m0_bytes(sf, tokens, hidden // 32), block_m)
    assert torch.equal(store, want)
    assert bool((arena[:37] == -1).all()) and bool((arena[-11:] == -1).all())


def test_mega_moe_sf_no_tokens():
    store, mega = mega_buffer(0, 1, 128)
    x = torch.empty(0, 128, dtype=torch.bfloat16)
    (q, sf), _, _, _ = tk.quant.norm_forward_and_per_token_cast(x, None, 1e-6, "e4m3", 32, round_sf=True,
                                                                 mega_moe_sf=mega, mega_moe_block_m=192)
    assert q.shape == (0, 128) and bool((store == -1).all())


def _call(x, **kw):
    args = dict(round_sf=True)
    args.update(kw)
    return tk.quant.norm_forward_and_per_token_cast(x, None, 1e-6, "e4m3", 32, **args)


@pytest.mark.parametrize("case, error, arg", [
    ("no_round_sf", ValueError, "round_sf"),
    ("hidden_160", ValueError, "x"),
    ("block_m_alone", ValueError, "mega_moe_sf"),
    ("buffer_alone", ValueError, "mega_moe_block_m"),
    ("negative_block_m", ValueError, "mega_moe_block_m"),
    ("row_major", ValueError, "mega_moe_sf"),
    ("few_rows", ValueError, "mega_moe_sf"),
    ("int64", TypeError, "mega_moe_sf"),
    ("wrong_shape", ValueError, "mega_moe_sf"),
    ("batched_x", ValueError, "x"),
])
def test_mega_moe_sf_argument_errors(case, error, arg):
    tokens, hidden, bm = 10, 512, 192
    x = torch.randn(tokens, hidden).to(torch.bfloat16)
    store, mega = mega_buffer(tokens, hidden // 128, padded_rows(tokens, bm))
    kw = dict(mega_moe_sf=mega, mega_moe_block_m=bm)
    if case == "no_round_sf":
        kw["round_sf"] = False
    elif case == "hidden_160":
        x = torch.randn(tokens, 160).to(torch.bfloat16)
        kw["mega_moe_sf"] = mega_buffer(tokens, 1, 256)[1]
    elif case == "block_m_alone":
        kw["mega_moe_sf"] = None
    elif case == "buffer_alone":
        kw["mega_moe_block_m"] = 0
    elif case == "negative_block_m":
        kw["mega_moe_block_m"] = -1
    elif case == "row_major":
        kw["mega_moe_sf"] = torch.full((tokens, hidden // 128), -1, dtype=torch.int32)
    elif case == "few_rows":
        kw["mega_moe_sf"] = mega_buffer(tokens, hidden // 128, 100)[1]
    elif case == "int64":
        kw["mega_moe_sf"] = torch.full((hidden // 128, 256), -1, dtype=torch.int64).T[:tokens]
    elif case == "wrong_shape":
        kw["mega_moe_sf"] = mega_buffer(tokens + 1, hidden // 128, 256)[1]
    elif case == "batched_x":
        x = x.unsqueeze(0)
    with pytest.raises(error, match=f"`{arg}`"):
        _call(x, **kw)
    assert bool((store == -1).all())
