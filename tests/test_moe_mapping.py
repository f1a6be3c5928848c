"""get_fused_mapping and get_mapping_from_psum: the chain of generated ops against the chain of their
generated references (bit for bit), an argsort oracle, and the invariants of an expanded layout."""
import importlib

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tkgen import registry
from tkgen.nn import moe_mapping as mapping
from tkgen.compat import tilekernels as tk
from tkgen.compat import tilekernels_v1 as tk1

# (experts, k, alignment): few, since each combination compiles its own kernels
SHAPES = [(1, 1, 1), (7, 4, 16), (8, 2, 128), (1024, 8, 16)]


def _ref(name):
    mod = importlib.import_module(registry.op_package(name).__name__ + ".reference")
    return mod.VARIANTS["base"]


def reference_chain(topk_idx, num_experts, rows, alignment):
    """tkgen.mapping's chain on the generated references."""
    flat = topk_idx.reshape(-1)
    chunk = mapping.chunk_for(flat.numel())
    counts, = _ref("mapping_chunk_counts")(flat, num_experts, chunk)
    offsets, totals = _ref("mapping_chunk_offsets")(counts, mapping.MAX_CHUNKS)
    if totals.shape[0] == 0:
        totals = torch.zeros(1, num_experts, dtype=torch.int32)
    aligned, start, end, psum = _ref("mapping_segments")(totals[:1], alignment)
    pos, = _ref("mapping_positions")(flat, offsets, start.view(-1), chunk)
    p2e, = _ref("get_mapping_from_psum")(psum.view(-1), torch.empty(rows, dtype=torch.int32), alignment)
    p2t, p2tk = _ref("mapping_scatter")(pos.view(topk_idx.shape), p2e)
    return p2e, p2t, p2tk, pos.view(topk_idx.shape), start.view(-1), end.view(-1), aligned.view(-1)


def oracle(topk_idx, num_experts, alignment):
    """(token_topk_to_pos, aligned counts, starts) from a stable argsort of the experts."""
    flat = topk_idx.reshape(-1)
    valid = flat >= 0
    count = torch.bincount(flat[valid], minlength=num_experts)
    aligned = (count + alignment - 1) // alignment * alignment
    start = torch.cumsum(aligned, 0) - aligned
    key = torch.where(valid, flat, torch.full_like(flat, num_experts))
    order = torch.argsort(key, stable=True)
    pos = torch.full_like(flat, -1)
    rank = torch.arange(flat.numel()) - torch.cumsum(torch.bincount(key, minlength=num_experts + 1), 0)[key[order]] \
        + torch.bincount(key, minlength=num_experts + 1)[key[order]]
    sorted_e = key[order]
    inside = sorted_e < num_experts
    pos[order[inside]] = start[sorted_e[inside]] + rank[inside]
    return pos.view(topk_idx.shape).int(), aligned.int(), start.int()


def check_invariants(out, topk_idx, num_experts, alignment):
    p2e, p2t, p2tk, t2p, start, end, aligned, listed = out
    tokens, k = topk_idx.shape
    flat = topk_idx.reshape(-1)
    rows = p2e.numel()
    assert listed == aligned.tolist() and rows == sum(listed)
    count = torch.bincount(flat[flat >= 0], minlength=num_experts)
    assert torch.equal(aligned.long(), (count + alignment - 1) // alignment * alignment)   # counts add up
    assert torch.equal(end - start, aligned) and (start % alignment == 0).all()
    assert start[0] == 0 and torch.equal(start[1:], end[:-1])                               # contiguous segments
    pos = t2p.reshape(-1)
    assert torch.equal(pos >= 0, flat >= 0)
    valid = pos[pos >= 0].long()
    assert valid.unique().numel() == valid.numel()                 # one position per valid slot, distinct
    for e in range(num_experts):                                   # each segment: its pairs, then padding
        seg = p2e[start[e]:end[e]]
        assert (seg[:count[e]] == e).all() and (seg[count[e]:] == -1).all()
    pad = p2e < 0
    assert torch.equal(pad, p2t < 0) and torch.equal(pad, p2tk < 0)    # the three -1 masks coincide
    used = p2tk[~pad].long()
    assert torch.equal(pos[used], torch.arange(rows, dtype=torch.int32)[~pad])   # round trip
    assert torch.equal(p2t[~pad], p2tk[~pad] // k)
    assert torch.equal(flat[used].int(), p2e[~pad])
    # inside a segment, ascending flat order
    for e in range(num_experts):
        seg = p2tk[start[e]:start[e] + count[e]]
        assert (seg[1:] > seg[:-1]).all()


def _routing(tokens, k, num_experts, seed, unused):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, num_experts, (tokens, k), generator=g, dtype=torch.int64)
    drop = torch.rand((tokens, k), generator=g) < unused
    if tokens > 2:
        drop[1] = True                                           # a row of -1 only
    return torch.where(drop, torch.full_like(idx, -1), idx)


@settings(max_examples=16, deadline=None)
@given(shape=st.sampled_from(SHAPES), tokens=st.sampled_from([0, 1, 2, 3, 17, 40, 300]),
       seed=st.integers(0, 2 ** 16), unused=st.sampled_from([0.0, 0.3, 1.0]))
@example(shape=SHAPES[0], tokens=0, seed=0, unused=0.0)
@example(shape=SHAPES[0], tokens=1, seed=0, unused=0.0)
@example(shape=SHAPES[3], tokens=300, seed=1, unused=0.3)
@example(shape=SHAPES[1], tokens=40, seed=2, unused=1.0)
def test_fused_mapping_matches_references_oracle_and_invariants(shape, tokens, seed, unused):
    num_experts, k, alignment = shape
    idx = _routing(tokens, k, num_experts, seed, unused)
    out = mapping.get_fused_mapping(idx, num_experts, 0, alignment)
    check_invariants(out, idx, num_experts, alignment)
    ref = reference_chain(idx, num_experts, out[0].numel(), alignment)
    for got, want in zip(out[:7], ref):
        assert torch.equal(got, want.to(got.dtype))
    pos, aligned, start = oracle(idx, num_experts, alignment)
    assert torch.equal(out[3], pos) and torch.equal(out[6], aligned) and torch.equal(out[4], start)


def test_sizes_given_and_no_sync():
    idx = _routing(40, 4, 7, 3, 0.2)
    full = mapping.get_fused_mapping(idx, 7, 0, 16)
    rows = full[0].numel()
    for given_rows, no_sync in ((rows + 5, False), (0, True)):
        out = mapping.get_fused_mapping(idx, 7, given_rows, 16, force_no_sync=no_sync)
        expect = given_rows or mapping.upper_bound(40, 4, 7, 16)
        assert out[7] == [] and out[0].numel() == expect
        for a, b in zip(out[:3], full[:3]):              # the same layout, the rows after it -1
            assert torch.equal(a[:rows], b) and (a[rows:] == -1).all()
        assert torch.equal(out[3], full[3])


def test_expand_then_reduce_with_unit_weights_gives_k_times_the_input():
    """k times each token's row, k its valid slots (token 1 has none: zeros)."""
    idx = _routing(17, 4, 7, 5, 0.0)
    p2e, _, _, t2p, *_ = tk1.moe.get_fused_mapping(idx, 7, 0, 16)
    x = torch.randint(-8, 8, (17, 32)).float()
    expanded = tk1.moe.expand_to_fused(x, t2p, p2e)
    back = tk1.moe.reduce_fused(expanded, torch.ones(17, 4), t2p)
    assert torch.equal(back, (idx >= 0).sum(1, keepdim=True).float() * x) and (back[1] == 0).all()


def test_mapping_from_psum():
    psum = torch.tensor([3, 16, 16, 21], dtype=torch.int32)          # counts 3, 0, 0, 5 with alignment 16
    got = tk.moe.get_mapping_from_psum(psum, 16, 50)
    want = torch.full((50,), -1, dtype=torch.int32)
    want[0:3], want[16:21] = 0, 3
    assert torch.equal(got, want)
    ref, = _ref("get_mapping_from_psum")(psum, torch.empty(50, dtype=torch.int32), 16)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("pairs, chunk", [(0, 64), (256 * 64, 64), (256 * 64 + 1, 128), (32008, 128)])
def test_chunk_keeps_one_prefix_group(pairs, chunk):
    assert mapping.chunk_for(pairs) == chunk


@pytest.mark.parametrize("pairs", [256 * 512, 256 * 512 + 1, 320000, 8192 * 64 * 8])
def test_chunk_past_one_group_stays_the_largest(pairs):
    """Past 131,072 pairs the chunk is 512 and the prefix takes levels (no refusal)."""
    assert mapping.chunk_for(pairs) == 512


def test_chunk_offsets_in_three_levels():
    """65,539 chunks: groups of 256 (257 of them), groups of those (2), then one: the offsets are the
    exclusive prefix down each column, the totals the column sums."""
    g = torch.Generator().manual_seed(11)
    counts = torch.randint(0, 4, (256 * 256 + 3, 256), generator=g, dtype=torch.int32)
    counts[:, 5] = 0                                                 # an expert no chunk holds
    offsets, totals = mapping.chunk_offsets(counts)
    total = counts.long().cumsum(0)
    assert torch.equal(offsets, (total - counts).int()) and torch.equal(totals, total[-1:].int())


@pytest.mark.parametrize("tokens, k, num_experts, alignment", [(40000, 8, 256, 16), (40000, 8, 256, 128),
                                                               (16385, 8, 256, 16)])
def test_fused_mapping_past_one_prefix_group(tokens, k, num_experts, alignment):
    """320,000 (and 131,080) pairs, more than 256 chunks of 512: every invariant, and the same mapping as
    a stable argsort, bit for bit; expand then reduce through it."""
    idx = _routing(tokens, k, num_experts, 7, 0.1)
    idx[3, :] = 9                                                    # an expert chosen k times by a token
    idx[tokens // 2:, :][idx[tokens // 2:, :] == 200] = 201           # an expert only the first half chooses
    idx[:, :][idx == 17] = 18                                        # an expert none chooses
    out = mapping.get_fused_mapping(idx, num_experts, 0, alignment)
    check_invariants(out, idx, num_experts, alignment)
    pos, aligned, start = oracle(idx, num_experts, alignment)
    assert torch.equal(out[3], pos) and torch.equal(out[6], aligned) and torch.equal(out[4], start)
    assert torch.equal(out[5], start + aligned)
    rows = out[0].numel()
    flat = idx.reshape(-1)
    p2tk = torch.full((rows,), -1, dtype=torch.int32)                # the inverse maps, from the oracle
    p2tk[pos.reshape(-1)[flat >= 0].long()] = torch.arange(flat.numel(), dtype=torch.int32)[flat >= 0]
    p2e = torch.where(p2tk >= 0, flat[p2tk.clamp(min=0).long()].int(), torch.full_like(p2tk, -1))
    assert torch.equal(out[2], p2tk) and torch.equal(out[0], p2e)
    assert torch.equal(out[1], torch.where(p2tk >= 0, p2tk // k, p2tk))
    no_sync = mapping.get_fused_mapping(idx, num_experts, 0, alignment, force_no_sync=True)
    assert no_sync[7] == [] and torch.equal(no_sync[0][:rows], out[0]) and (no_sync[0][rows:] == -1).all()
    if alignment == 16 and tokens == 40000:
        x = torch.randint(-8, 8, (tokens, 32)).float()
        expanded = tk1.moe.expand_to_fused(x, out[3], out[0])
        back = tk1.moe.reduce_fused(expanded, torch.ones(tokens, k), out[3])
        assert torch.equal(back, (idx >= 0).sum(1, keepdim=True).float() * x)


@pytest.mark.parametrize("tokens, launches", [(16384, ["mapping_chunk_counts", "mapping_chunk_offsets",
                                                        "mapping_segments", "mapping_positions",
                                                        "get_mapping_from_psum", "mapping_scatter"]),
                                               (16385, ["mapping_chunk_counts", "mapping_chunk_offsets",
                                                        "mapping_chunk_offsets", "mapping_group_offsets",
                                                        "mapping_segments", "mapping_positions",
                                                        "get_mapping_from_psum", "mapping_scatter"])])
def test_launches_one_prefix_group_up_to_131072_pairs(monkeypatch, tokens, launches):
    """Up to 131,072 pairs the same six launches as before the levels (chunk 512, one group); one pair
    more takes a second level: the groups' prefix and the addition of their offsets."""
    calls = []

    def recording(name, op):
        def call(*args, **kw):
            calls.append(name)
            return op(*args, **kw)
        return call
    monkeypatch.setattr(mapping, "_OPS", {n: recording(n, op) for n, op in mapping._OPS.items()})
    idx = _routing(tokens, 8, 256, 3, 0.1)
    out = mapping.get_fused_mapping(idx, 256, 0, 16)
    assert calls == launches and mapping.chunk_for(idx.numel()) == 512
    pos, aligned, start = oracle(idx, 256, 16)
    assert torch.equal(out[3], pos) and torch.equal(out[6], aligned) and torch.equal(out[4], start)


# (experts, k, alignment) of the property test below: shapes the tests above compile already
CHECKED = [SHAPES[1], SHAPES[2]]


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from(CHECKED), tokens=st.integers(1, 12), data=st.data())
def test_routing_inputs_rejected_or_equal_to_the_reference(shape, tokens, data):
    """Ids drawn past both ends of [-1, E) and repeated in a row, positions corrupted out of range or onto
    another's row: what the checks reject raises ValueError naming the argument; what they admit equals
    the generated references (the mapping chain, the argsort oracle, expand and reduce)."""
    num_experts, k, alignment = shape
    ids = data.draw(st.lists(st.lists(st.integers(-3, num_experts + 2), min_size=k, max_size=k),
                             min_size=tokens, max_size=tokens))
    idx = torch.tensor(ids, dtype=torch.int64)
    if ((idx < -1) | (idx >= num_experts)).any():
        with pytest.raises(ValueError, match=r"`topk_idx` must hold values in \[-1, "):
            tk1.moe.get_fused_mapping(idx, num_experts, 0, alignment)
        return
    out = tk1.moe.get_fused_mapping(idx, num_experts, 0, alignment)
    check_invariants(out, idx, num_experts, alignment)
    for got, want in zip(out[:7], reference_chain(idx, num_experts, out[0].numel(), alignment)):
        assert torch.equal(got, want.to(got.dtype))
    assert torch.equal(out[3], oracle(idx, num_experts, alignment)[0])
    p2e, t2p = out[0], out[3].clone()
    rows = p2e.numel()
    corrupt = data.draw(st.sampled_from(["none", "past", "below", "twice"]))
    valid = (t2p >= 0).nonzero()
    if corrupt == "past":
        t2p[0, 0] = rows + data.draw(st.integers(0, 100000))
    elif corrupt == "below":
        t2p[0, 0] = data.draw(st.integers(-1000, -2))
    elif corrupt == "twice" and len(valid) >= 2:
        (a, b), (c, d) = valid[0].tolist(), valid[-1].tolist()
        t2p[a, b] = t2p[c, d]
    else:
        corrupt = "none"
    x = torch.randint(-8, 8, (tokens, 32)).float()
    w = torch.randint(1, 4, (tokens, k)).float()
    if corrupt == "none":
        expanded = tk1.moe.expand_to_fused(x, t2p, p2e)
        assert torch.equal(expanded, _ref("expand_to_fused")(x, t2p, p2e)[0])
    else:
        with pytest.raises(ValueError, match="`token_topk_to_pos` must hold"):
            tk1.moe.expand_to_fused(x, t2p, p2e)
        expanded = torch.randint(-8, 8, (rows, 32)).float()
    if corrupt in ("past", "below"):
        with pytest.raises(ValueError, match=r"`token_topk_to_pos` must hold values in \[-1, "):
            tk1.moe.reduce_fused(expanded, w, t2p)
    else:       # reading a row twice is well defined
        ref = importlib.import_module(registry.op_package("reduce_fused").__name__ + ".reference")
        want, = ref.VARIANTS["fp32_with_topk_weights"](expanded, w, None, None, t2p)
        assert torch.equal(tk1.moe.reduce_fused(expanded, w, t2p), want)


def test_routing_checks_name_the_argument_and_the_rule():
    idx = torch.tensor([[1, 9], [9, 9]])
    with pytest.raises(ValueError, match=r"`topk_idx` must hold values in \[-1, 7\].*found 9"):
        tk1.moe.get_fused_mapping(idx, 8, 0, 16)
    with pytest.raises(TypeError, match="`topk_idx` must have dtype torch.int64, got torch.int32"):
        tk1.moe.get_fused_mapping(idx.int(), 8, 0, 16)
    with pytest.raises(ValueError, match="`topk_idx` must have rank 2"):
        tk1.moe.get_fused_mapping(idx.view(-1), 8, 0, 16)
    with pytest.raises(ValueError, match="`alignment` must be an integer >= 1, got 0"):
        tk1.moe.get_fused_mapping(idx, 8, 0, 0)
    with pytest.raises(ValueError, match=r"`num_experts` must be an integer in \[1, 1024\], got 0"):
        tk1.moe.get_fused_mapping(idx, 0, 0, 16)
    with pytest.raises(ValueError, match="`topk_idx` must hold values at most 3"):
        tk1.moe.aux_fi(torch.tensor([[0, 5]]), 4, 2)
    with pytest.raises(ValueError, match="`group_indices` must hold values at most 127"):
        tk1.moe.inplace_unique_group_indices(torch.tensor([[0, 200]]), 128)
    with pytest.raises(TypeError, match="`pos_to_expert` must have dtype torch.int32"):
        tk1.moe.expand_to_fused(torch.zeros(1, 32), torch.zeros(1, 1, dtype=torch.int32), torch.zeros(1))
    import tkgen.nn.functional as F           # the differentiable steps: their backward stores at the positions
    twice, p2e = torch.tensor([[0, 1], [1, -1]], dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    with pytest.raises(ValueError, match="moe_expand: `token_topk_to_pos` must hold distinct positions"):
        F.moe_expand(torch.zeros(2, 32), twice, p2e)
    with pytest.raises(ValueError, match="moe_reduce: `token_topk_to_pos` must hold distinct positions"):
        F.moe_reduce(torch.zeros(4, 32), None, twice, p2e)
    with pytest.raises(ValueError, match=r"moe_reduce: `token_topk_to_pos` must hold values in \[-1, 3\]"):
        F.moe_reduce(torch.zeros(4, 32), None, twice + 4, p2e)


def test_tkgen_ops_drop_positions_outside_the_rows_as_their_references_do():
    """tkgen.ops' expand_to_fused and reduce_fused (unlike the compat functions, which reject them) document
    a position outside [0, rows) as skipped (expand: nothing stored; reduce: the row reads 0): the kernel
    and the reference agree on it."""
    import tkgen.ops as ops
    x = torch.randn(3, 32)
    t2p = torch.tensor([[0, 100000], [-5, 2], [1, 7]], dtype=torch.int32)
    p2e = torch.tensor([0, 0, 1, -1], dtype=torch.int32)
    assert torch.equal(ops.expand_to_fused(x, t2p, p2e), _ref("expand_to_fused")(x, t2p, p2e)[0])
    xe = torch.randn(4, 32)
    ref = importlib.import_module(registry.op_package("reduce_fused").__name__ + ".reference")
    assert torch.equal(ops.reduce_fused(xe, t2p, out_format="fp32"),
                       ref.VARIANTS["fp32"](xe, None, None, None, t2p)[0])
