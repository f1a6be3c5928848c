"""The composites that `tkgen bench` does not reach, timed eager and under CUDA graphs against what a user has.

    python benchmarks/bench_routing.py [--device cuda|cpu] [--out DIR]

- `get_fused_mapping` (a chain of six generated kernels, tkgen/nn/moe_mapping.py) for 4001 tokens,
  k = 8, 256 experts, alignment 16, and at a training step's 8192 tokens x 64 ranks x k = 8 (4.2M pairs,
  eight kernels: the chunk prefix in two levels), against a plain-PyTorch mapping (`plain_mapping`: a stable argsort, a
  scatter-add histogram, cumulative sums), eager and under torch.compile. The outputs are checked equal
  first (the plain one puts a segment's pairs in ascending t * K + k, as tkgen does).
- `moe_capacity_mask` (two generated kernels: each block's row sums, then the op with the blocks before
  added; tkgen/schedule/row_scans.py) at 4096 and 65,536 tokens, k = 8, 256 experts, capacity 1.25x the
  mean load, against a plain-PyTorch capacity dispatch (`plain_capacity`: a stable argsort, a bincount,
  cumulative sums), eager and under torch.compile, after checking the outputs equal.
- `apply_rotary` through tkgen.compat.tilekernels.transform against TileKernels 2.1.0 (where it imports):
  bf16 2001 x 32 heads x 128 (NeoX pairs), and DeepSeek-V3's slice q[..., -64:] of a (4096, 128, 192)
  query with a (163840, 64) cache, interleaved pairs, int64 positions. Both rotate copies of the same
  query, whose bits are compared first, the untouched columns included.

Each time is the median of `tkgen.tools.bench.time_fn` (eager: back-to-back Python calls between CUDA events;
graph: the same calls captured once and replayed). Prints a table and writes routing.json under --out.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tkgen.tools.bench import time_fn


def plain_mapping(topk_idx, num_experts, rows, alignment):
    """The expert-major layout with torch primitives and no data-dependent shapes (so torch.compile takes
    it whole): (pos_to_expert, pos_to_token, pos_to_token_topk, token_topk_to_pos, start, end, aligned)."""
    flat = topk_idx.reshape(-1)
    n, k = flat.numel(), topk_idx.shape[1]
    key = torch.where(flat >= 0, flat, num_experts)             # unrouted pairs sort last, into a dump row
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, key, torch.ones_like(key))
    order = torch.argsort(key, stable=True)
    sorted_key = key[order]
    first = torch.cumsum(counts, 0) - counts
    rank = torch.arange(n, device=flat.device) - first[sorted_key]
    aligned = (counts[:num_experts] + alignment - 1) // alignment * alignment
    start = torch.cumsum(aligned, 0) - aligned
    start_ext = torch.cat([start, start.new_full((1,), rows)])
    pos_sorted = start_ext[sorted_key] + rank
    pos_sorted = torch.where(sorted_key < num_experts, pos_sorted, rows)
    minus = lambda size: torch.full((size,), -1, dtype=torch.int32, device=flat.device)  # noqa: E731
    pos_to_expert, pos_to_token, pos_to_token_topk = minus(rows + 1), minus(rows + 1), minus(rows + 1)
    pos_to_expert.scatter_(0, pos_sorted, sorted_key.to(torch.int32))
    pos_to_token.scatter_(0, pos_sorted, (order // k).to(torch.int32))
    pos_to_token_topk.scatter_(0, pos_sorted, order.to(torch.int32))
    token_topk_to_pos = minus(n)
    token_topk_to_pos.scatter_(0, order, torch.where(sorted_key < num_experts, pos_sorted, -1).to(torch.int32))
    end = start + aligned
    return (pos_to_expert[:rows], pos_to_token[:rows], pos_to_token_topk[:rows],
            token_topk_to_pos.view(topk_idx.shape), start.to(torch.int32), end.to(torch.int32), aligned.to(torch.int32))


def plain_capacity(topk_idx, num_experts, capacity):
    """(mask, slot, kept) of a capacity dispatch with torch primitives: a slot's rank is its place in a
    stable sort by expert less the expert's first place; kept where below the capacity."""
    flat = topk_idx.reshape(-1)
    valid = (flat >= 0) & (flat < num_experts)
    key = torch.where(valid, flat, num_experts)
    order = torch.argsort(key, stable=True)
    counts = torch.bincount(key, minlength=num_experts + 1)
    first = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(flat)
    rank[order] = torch.arange(flat.numel(), device=flat.device) - first[key[order]]
    keep = valid & (rank < capacity)
    slot = torch.where(keep, rank, -1).to(torch.int32).view(topk_idx.shape)
    kept = torch.clamp(counts[:num_experts], max=capacity).to(torch.int32)
    return keep.to(torch.int32).view(topk_idx.shape), slot, kept


CAPACITY_CASES = [(4096, 8, 256), (65536, 8, 256)]     # (tokens, k, experts); capacity 1.25x the mean load


def bench_capacity(device, rows_out):
    import tkgen.ops as ops
    for tokens, k, experts in CAPACITY_CASES:
        capacity = (tokens * k * 5) // (experts * 4)
        name = f"moe_capacity_mask {tokens}x{k}, {experts} experts, capacity {capacity}"
        inputs = [torch.rand(tokens, experts, device=device).argsort(dim=1)[:, :k].contiguous() for _ in range(4)]
        for idx in inputs[:2]:
            for g, w, what in zip(ops.moe_capacity_mask(idx, experts, capacity),
                                  plain_capacity(idx, experts, capacity), ("mask", "slot", "kept")):
                assert torch.equal(g, w), f"{what} differs from the plain capacity dispatch"
        rows_out.append(_row(name, "tkgen", *_times([lambda i=i: ops.moe_capacity_mask(i, experts, capacity)
                                                      for i in inputs], device)))
        rows_out.append(_row(name, "plain torch", *_times([lambda i=i: plain_capacity(i, experts, capacity)
                                                            for i in inputs], device)))
        compiled = torch.compile(plain_capacity, dynamic=False)
        rows_out.append(_row(name, "torch.compile(plain)", *_times([lambda i=i: compiled(i, experts, capacity)
                                                                     for i in inputs], device)))


def _row(name, impl, eager, graph, note=""):
    return {"case": name, "impl": impl, "eager_us": eager, "graph_us": graph, "note": note}


def _times(fns, device):
    eager = time_fn(fns, device, graph=False)[0]
    graph, _, used = time_fn(fns, device, graph=True)
    return eager, graph if used else None


MAPPING_CASES = [(4001, 8, 256, 16), (8192 * 64, 8, 256, 16)]     # (tokens, k, experts, alignment)


def bench_mapping(device, rows_out):
    for case in MAPPING_CASES:
        _bench_mapping(device, rows_out, *case)


def _bench_mapping(device, rows_out, tokens, k, experts, alignment):
    from tkgen.compat.tilekernels_v1.moe import get_fused_mapping
    rows = (tokens * k + (alignment - 1) * experts) // alignment * alignment
    name = f"get_fused_mapping {tokens}x{k}, {experts} experts, alignment {alignment}"
    inputs = [torch.randint(0, experts, (tokens, k), device=device) for _ in range(4)]
    inputs[1][::7, 3] = -1                                    # some unrouted pairs
    for idx in inputs[:2]:
        got = get_fused_mapping(idx, experts, rows, alignment)
        want = plain_mapping(idx, experts, rows, alignment)
        for g, w, what in zip(got, want, ("pos_to_expert", "pos_to_token", "pos_to_token_topk",
                                          "token_topk_to_pos", "start", "end", "aligned")):
            assert torch.equal(g.to(torch.int32), w), f"{what} differs from the plain mapping"
    rows_out.append(_row(name, "tkgen", *_times([lambda i=i: get_fused_mapping(i, experts, rows, alignment)
                                                  for i in inputs], device)))
    rows_out.append(_row(name, "plain torch", *_times([lambda i=i: plain_mapping(i, experts, rows, alignment)
                                                        for i in inputs], device)))
    compiled = torch.compile(plain_mapping, dynamic=False)
    rows_out.append(_row(name, "torch.compile(plain)", *_times([lambda i=i: compiled(i, experts, rows, alignment)
                                                                 for i in inputs], device)))


def _rope_cases(device):
    """(name, make query, cache, positions, interleaved)."""
    g = torch.Generator(device="cpu").manual_seed(5)
    cache_a = torch.randn(8192, 128, generator=g).to(device)
    pos_a = torch.randint(0, 8192, (2001,), generator=g, dtype=torch.int32).to(device)
    cache_b = torch.randn(163840, 64, generator=g).to(device)
    pos_b = torch.randint(0, 163840, (4096,), generator=g, dtype=torch.int64).to(device)
    return [("apply_rotary bf16 2001x32x128", lambda: torch.randn(2001, 32, 128, device=device).to(torch.bfloat16),
             lambda q: q, cache_a, pos_a, False),
            ("apply_rotary bf16 q[..., -64:] of 4096x128x192, interleaved",
             lambda: torch.randn(4096, 128, 192, device=device).to(torch.bfloat16), lambda q: q[..., -64:],
             cache_b, pos_b, True)]


def bench_rope(device, rows_out):
    import tkgen.compat.tilekernels as ours
    try:
        import tile_kernels as theirs
        theirs.transform.apply_rotary
    except Exception as e:                                   # noqa: BLE001 (not installed on this machine)
        theirs, why = None, f"TileKernels: {type(e).__name__}"
    for name, make, view, cache, pos, inter in _rope_cases(device):
        base = make()
        impls = [("tkgen", ours.transform.apply_rotary)] + ([("TileKernels 2.1.0", theirs.transform.apply_rotary)]
                                                            if theirs else [])
        results = {}
        for impl, fn in impls:
            q = base.clone()
            fn(view(q), cache, positions=pos, interleaved=inter)
            results[impl] = q
        note = ""
        if len(results) == 2:
            a, b = results.values()
            same = torch.equal(a.view(torch.int16), b.view(torch.int16))
            note = "bits equal to TileKernels" if same else \
                f"{int((a.view(torch.int16) != b.view(torch.int16)).sum())} elements differ from TileKernels"
        elif theirs is None:
            note = why
        for impl, fn in impls:
            qs = [base.clone() for _ in range(4)]
            fns = [lambda q=q, fn=fn: fn(view(q), cache, positions=pos, interleaved=inter) for q in qs]
            rows_out.append(_row(name, impl, *_times(fns, device), note))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", default=None, help="one of mapping, capacity, rope")
    args = ap.parse_args()
    device = torch.device(args.device)
    rows = []
    benches = (bench_mapping, bench_capacity, bench_rope)
    for bench in [b for b in benches if args.only is None or b.__name__ == "bench_" + args.only]:
        try:
            bench(device, rows)
        except Exception as e:                               # noqa: BLE001 (report, go on to the next)
            rows.append(_row(bench.__name__, "failed", None, None, f"{type(e).__name__}: {e}"))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "routing.json").write_text(json.dumps(rows, indent=1))
    fmt = lambda v: "-" if v is None else f"{v:.1f}"        # noqa: E731
    print("| case | impl | eager us | CUDA graph us | note |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['impl']} | {fmt(r['eager_us'])} | {fmt(r['graph_us'])} | {r['note']} |")


if __name__ == "__main__":
    main()
