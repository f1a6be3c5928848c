"""`get_fused_mapping`: the expanded (expert-major) layout of a routing, as a chain of generated ops.

Every kernel comes from a spec under specs/moe/; this module only sizes buffers, reshapes (views, no
copies) and calls them in order:

1. `mapping_chunk_counts`: the flattened pairs i = t * K + k in chunks of `chunk`; per chunk, the pairs of
   each expert (a grid over the chunks);
2. `mapping_chunk_offsets`: per expert, the exclusive prefix of those counts over the chunks of each group
   of MAX_CHUNKS (each chunk's offset inside its group's share of the expert's segment) and the group's
   totals (a grid over the groups and experts);
3. `mapping_segments`: aligned counts, segment starts (an exclusive prefix over the experts), ends and
   psum (one block);
4. `mapping_positions`: each pair's position, start + offset + its rank among the earlier pairs of its
   chunk with the same expert (a grid over the chunks);
5. `get_mapping_from_psum`: pos_to_expert, -1 on padding rows (a grid over the rows);
6. `mapping_scatter`: pos_to_token and pos_to_token_topk at the positions, -1 elsewhere (a grid over
   the tokens).

Any number of pairs. Up to MAX_CHUNKS * 512 = 131,072 pairs the chunk (64 to 512) leaves at most
MAX_CHUNKS chunks, one group: the six launches above. Past that the chunk stays 512 and the prefix of
step 2 takes levels (`chunk_offsets`), two launches each: the groups' totals [G, E] are prefixed by
`mapping_chunk_offsets` in groups of MAX_CHUNKS again (recursively, until one group is left: a second
level up to 33.5M pairs, a third past that), and `mapping_group_offsets` adds each group's offset to
its chunks' offsets. At 4.2M pairs (8203 chunks, 33 groups) that is eight launches; the work stays
linear in the pairs. Positions are int32: the rows must stay below 2**31.

Inside an expert's segment the pairs are in ascending flat order i (docs/numerics.md), on every target.
"""
from __future__ import annotations

from typing import List, Tuple

import torch

from .. import registry
from ..runtime.arguments import int_arg, routing_ids

MAX_CHUNKS = 256           # chunks of one prefix (mapping_chunk_offsets' group): the chunk grows to it, then levels
MIN_CHUNK = 64
CHUNKS = (64, 128, 256, 512)   # mapping_positions compares a chunk's pairs pairwise: at most 512


# resolved when this module is imported, so that torch.compile only reads it (the registry globs files)
_OPS = {name: getattr(registry.op_package(name), name)
        for name in ("mapping_chunk_counts", "mapping_chunk_offsets", "mapping_segments", "mapping_positions",
                     "get_mapping_from_psum", "mapping_scatter", "mapping_group_offsets")}


def _op(name):
    return _OPS[name]


def chunk_for(pairs: int) -> int:
    """The chunk length: the smallest of CHUNKS that keeps the chunks at most MAX_CHUNKS (one prefix
    group), the largest past MAX_CHUNKS * CHUNKS[-1] pairs (several groups: see `chunk_offsets`)."""
    for c in CHUNKS:
        if -(-pairs // c) <= MAX_CHUNKS:
            return c
    return CHUNKS[-1]


def chunk_offsets(counts: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(offsets [NB, E], totals [1, E] or [0, E] for no chunks): the exclusive prefix of counts [NB, E] down
    each column and the column sums. One `mapping_chunk_offsets` for at most MAX_CHUNKS rows; past that,
    the groups' totals are prefixed the same way (a level per factor of MAX_CHUNKS) and
    `mapping_group_offsets` adds each group's offset to the offsets inside it."""
    offsets, totals = _op("mapping_chunk_offsets")(counts, group=MAX_CHUNKS)
    if totals.shape[0] <= 1:
        return offsets, totals
    group_offsets, totals = chunk_offsets(totals)
    return _op("mapping_group_offsets")(offsets, group_offsets, group=MAX_CHUNKS), totals


def upper_bound(tokens: int, topk: int, num_experts: int, alignment: int) -> int:
    """The most rows an expanded layout can take: floor((T*K + (alignment-1)*E) / alignment) * alignment."""
    return (tokens * topk + (alignment - 1) * num_experts) // alignment * alignment


def segments(topk_idx: torch.Tensor, num_experts: int, alignment: int):
    """(token_topk_to_pos [T, K], aligned counts, starts, ends, psum [E]): steps 1 to 4."""
    # the ids' values are checked by the public entry (get_fused_mapping), which may skip reading them back
    routing_ids("get_fused_mapping", "topk_idx", topk_idx, num_experts, no_sync=True)
    int_arg("get_fused_mapping", "num_experts", num_experts, 1, 1024)
    flat = topk_idx.contiguous().view(-1)
    chunk = chunk_for(flat.numel())
    counts = _op("mapping_chunk_counts")(flat, num_experts, chunk)
    offsets, totals = chunk_offsets(counts)
    if totals.shape[0] == 0:               # no pairs: every expert has none
        totals = torch.zeros(1, num_experts, dtype=torch.int32, device=flat.device)
    aligned, start, end, psum = _op("mapping_segments")(totals[:1], alignment)
    start = start.view(-1)
    pos = _op("mapping_positions")(flat, offsets, start, chunk)
    return pos.view(topk_idx.shape), aligned.view(-1), start, end.view(-1), psum.view(-1)


def from_psum(psum: torch.Tensor, alignment: int, num_expanded_tokens: int) -> torch.Tensor:
    """pos_to_expert int32 [num_expanded_tokens]: expert e on its valid rows [align(psum[e-1]), psum[e]),
    -1 on every other row."""
    out = torch.empty(num_expanded_tokens, dtype=torch.int32, device=psum.device)
    _op("get_mapping_from_psum")(psum.to(torch.int32).contiguous(), out, alignment)
    return out


def get_fused_mapping(topk_idx: torch.Tensor, num_experts: int, num_expanded_tokens: int, alignment: int,
                      force_no_sync: bool = False) -> Tuple[torch.Tensor, ...]:
    """(pos_to_expert, pos_to_token, pos_to_token_topk [T_exp], token_topk_to_pos [T, K], expert_start,
    expert_end, num_tokens_per_expert [E] (aligned counts), num_tokens_per_expert_list), all int32.

    T_exp is num_expanded_tokens; with 0, the upper bound floor((T*K + (alignment-1)*E) / alignment) *
    alignment, and unless force_no_sync the host synchronises on the aligned counts (returned as the
    list, empty otherwise) and T_exp is their sum. -1 marks every row that holds no pair (the padding at
    the end of each segment) in the three position maps, and the pairs whose topk_idx is negative in
    token_topk_to_pos. Inside a segment the pairs are in ascending flat order t * K + k.

    topk_idx must hold ids in [-1, num_experts) (ValueError otherwise), checked by one aminmax and one
    read-back, except on CUDA with force_no_sync or under graph capture, where the caller vouches for them."""
    name = "get_fused_mapping"
    int_arg(name, "num_experts", num_experts, 1, 1024)
    int_arg(name, "alignment", alignment, 1)
    int_arg(name, "num_expanded_tokens", num_expanded_tokens, 0)
    routing_ids(name, "topk_idx", topk_idx, num_experts, no_sync=force_no_sync)
    tokens, topk = topk_idx.shape
    pos, aligned, start, end, psum = segments(topk_idx, num_experts, alignment)
    listed: List[int] = []
    rows = num_expanded_tokens
    if rows == 0:
        rows = upper_bound(tokens, topk, num_experts, alignment)
        if not force_no_sync:
            listed = aligned.tolist()
            rows = sum(listed)
    pos_to_expert = from_psum(psum, alignment, rows)
    pos_to_token, pos_to_token_topk = _op("mapping_scatter")(pos, pos_to_expert)
    return pos_to_expert, pos_to_token, pos_to_token_topk, pos, start, end, aligned, listed
