"""The MoE gates' options (issue 28) on a GPU: tkgen.compat.tilekernels against tile_kernels 2.1.0 on the
same inputs, and every tkgen output against tkgen's generated reference on CUDA.

    python benchmarks/gate_options_bits.py

For moe_topk_gate_forward (TileKernels' test configs, 4001 tokens + 10 masked padding tokens): bias, image
bias, fixed routing (unmapped_topk_idx in/out), a random contiguous physical map with 1 to 3 duplicates per
expert, shared experts as routed; the number of differing elements per output (row-sorted indices as
TileKernels' test compares them, and as returned). For moe_topk_gate_backward with grad_scores_sum
(N_seq 1 and 2): the largest difference relative to the largest |grad| (TileKernels compiles it with fast
math). For the first release's top2_sum_gate (not in 2.1.0): tkgen's CUDA kernel against its reference.
"""
import importlib
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tkgen.compat.tilekernels as tk  # noqa: E402
import tkgen.compat.tilekernels_v1 as tk1  # noqa: E402
import tkgen.ops as ops  # noqa: E402
from tkgen import registry  # noqa: E402
from tkgen.testing.check import compare, reference_outputs  # noqa: E402


TOKENS = int(os.environ.get("TOKENS", 4011))


def diff(a, b):
    if a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    return int((a != b).sum())


FORWARD_CASES = [(72, 1, 6, "bias,fix"), (72, 1, 6, "bias,image,fix,map"), (256, 2, 8, "bias,image"),
                 (256, 2, 8, "bias,map"), (256, 2, 8, "bias,image,fix,map")]


def pmap_for(logical, dups, g, dev):
    count = torch.randint(1, dups + 1, (logical,), generator=g, dtype=torch.int32)
    start = torch.cumsum(count, 0) - count
    cols = torch.arange(dups, dtype=torch.int32)
    return torch.where(cols < count[:, None], start[:, None] + cols, -1).to(torch.int32).to(dev), count.to(dev)


def against_reference(op, tensors, params, outs):
    pkg = registry.op_package(op)
    info = importlib.import_module(pkg.__name__ + ".op").OP
    want = reference_outputs(info, pkg, tensors, params)
    bad = []
    for o, got, w in zip(info.outputs, outs, want):
        try:
            compare(o.name, got, w, "bit")
        except AssertionError as e:
            bad.append(str(e)[:200])
    return bad or "bit-exact"


def forward(tkm, dev):
    g = torch.Generator().manual_seed(1)
    for e, shared, k, opts in FORWARD_CASES:
        if True:
            t = TOKENS
            logits = torch.randn(t, e, generator=g).to(dev)
            mask = torch.ones(t, dtype=torch.bool)
            mask[-10:] = False
            kw = dict(mask=mask.to(dev), bias=(torch.randn(e, generator=g) * 0.1).to(dev))
            if "image" in opts:
                kw.update(image_bias=(torch.randn(e, generator=g) * 0.1).to(dev),
                          image_token_mask=(torch.rand(t, generator=g) > 0.5).to(dev))
            given = torch.randint(0, e, (t, k), generator=g).to(dev)
            if "fix" in opts:
                kw["fix_routing_mask"] = (torch.rand(t, generator=g) > 0.5).to(dev)
            use_shared = "map" in opts
            if use_shared:
                kw["to_physical_map"], kw["logical_count"] = pmap_for(e + shared, 3, g, dev)
            s = shared if use_shared else 0
            res = {}
            for name, mod in (("tkgen", tk.moe), ("tile_kernels", tkm)):
                if mod is None:
                    continue
                un, sc = given.clone(), torch.empty(t, e, device=dev)
                idx, w = mod.moe_topk_gate_forward(logits, k, use_shared, s, 1.5, 0, unmapped_topk_idx=un, scores=sc,
                                                   **kw)
                res[name] = (idx, w, un, sc)
            a = res["tkgen"]
            line = f"forward E={e} S={s} K={k} {opts}:"
            if "tile_kernels" in res:
                b = res["tile_kernels"]
                line += " vs tile_kernels differing idx %d (row-sorted %d), weights %d (row-sorted %d), " \
                        "unmapped %d (row-sorted %d), scores %d" % (
                            diff(a[0], b[0]), diff(a[0].sort(-1).values, b[0].sort(-1).values),
                            diff(a[1], b[1]), diff(a[1].sort(-1).values, b[1].sort(-1).values),
                            diff(a[2], b[2]), diff(a[2].sort(-1).values, b[2].sort(-1).values), diff(a[3], b[3]))
            i32 = (lambda m: None if m is None else m.to(torch.int32))
            tensors = dict(logits=logits, mask=i32(kw["mask"]), bias=kw["bias"], image_bias=kw.get("image_bias"),
                           image_token_mask=i32(kw.get("image_token_mask")),
                           fix_routing_mask=i32(kw.get("fix_routing_mask")),
                           unmapped_topk_idx=given if "fix" in opts else None,
                           to_physical_map=kw.get("to_physical_map"), logical_count=kw.get("logical_count"))
            params = dict(num_topk=k, num_slots=k + s, routed_scaling_factor=1.5, ep_rank=0,
                          num_dups=3 if use_shared else 1)
            outs = ops.moe_topk_gate_forward(**tensors, **params)
            line += f"; tkgen vs its reference on the device: {against_reference('moe_topk_gate_forward', tensors, params, outs)}"
            print(line, flush=True)


def wrapped(tkm, dev):
    """Past token 92036 the duplicate's int32 product wraps: tkgen reads the map as TileKernels' kernel does."""
    t, e = 92040, 4
    logits = torch.zeros(t, e, device=dev)
    logits[:, 2] = 1.0
    count = torch.tensor([1, 3, 3, 1], dtype=torch.int32, device=dev)
    pmap = torch.tensor([[1, -1, -1], [20, 21, 22], [30, 31, 32], [3, -1, -1]], dtype=torch.int32, device=dev)
    line = "forward T=92040 with a map (int32 wrap):"
    res = {}
    for name, mod in (("tkgen", tk.moe), ("tile_kernels", tkm)):
        if mod is not None:
            res[name] = mod.moe_topk_gate_forward(logits, 1, False, 0, 1.0, 7, to_physical_map=pmap,
                                                  logical_count=count)[0]
    if "tile_kernels" in res:
        line += " vs tile_kernels differing idx %d (of them past 92036: %d)" % (
            diff(res["tkgen"], res["tile_kernels"]), diff(res["tkgen"][92037:], res["tile_kernels"][92037:]))
    tensors = dict(logits=logits, to_physical_map=pmap, logical_count=count)
    params = dict(num_topk=1, num_slots=1, ep_rank=7, num_dups=3)
    outs = ops.moe_topk_gate_forward(**tensors, **params)
    line += f"; tkgen vs its reference on the device: {against_reference('moe_topk_gate_forward', tensors, params, outs)}"
    print(line, flush=True)


def backward(tkm, dev):
    g = torch.Generator().manual_seed(2)
    for seqs in (1, 2):
        t, e, k = 2 * TOKENS, 256, 8
        logits = torch.randn(t, e, generator=g).to(dev)
        mask = torch.ones(t, dtype=torch.bool, device=dev)
        mask[-10:] = False
        u, un = torch.empty(t, e, device=dev), torch.empty(t, k, dtype=torch.int64, device=dev)
        _, w = tk.moe.moe_topk_gate_forward(logits, k, False, 0, 1.5, 0, mask=mask, scores=u, unmapped_topk_idx=un)
        gw = torch.randn(t, k, generator=g).to(dev)
        gss = torch.randn(seqs, e, generator=g).to(dev)
        a = tk.moe.moe_topk_gate_backward(u, un, w, gw, 1.5, mask=mask, grad_scores_sum=gss)
        line = f"backward N_seq={seqs}:"
        if tkm is not None:
            b = tkm.moe_topk_gate_backward(u, un, w, gw, 1.5, mask=mask, grad_scores_sum=gss)
            line += " vs tile_kernels max|diff| / max|grad| = %.3g, differing %d of %d" % (
                float((a - b).abs().max() / b.abs().max()), diff(a, b), a.numel())
        tensors = dict(scores=u, topk_idx=un, topk_weights=w, grad_topk_weights=gw, grad_scores_sum=gss,
                       mask=mask.to(torch.int32))
        params = dict(routed_scaling_factor=1.5, num_seqs=seqs, seq_len=t // seqs)
        line += f"; tkgen vs its reference on the device: {against_reference('moe_topk_gate_backward', tensors, params, (a,))}"
        print(line, flush=True)


def top2(dev):
    g = torch.Generator().manual_seed(3)
    for scoring, groups, topk_groups, e, shared, k in (("sigmoid", 8, 4, 256, 2, 8), ("softmax", 0, 0, 72, 1, 6)):
        t = TOKENS
        logits = torch.randn(t, e, generator=g).to(dev)
        bias = (torch.randn(e, generator=g) * 0.1).to(dev)
        mask = torch.ones(t, dtype=torch.int32, device=dev)
        mask[-10:] = 0
        fixed = (torch.rand(t, generator=g) > 0.5).to(torch.int32).to(dev)
        given = torch.randint(0, e, (t, k), generator=g).to(dev)
        pmap = torch.arange(e + shared, dtype=torch.int32, device=dev)[:, None].expand(e + shared, 33).contiguous()
        count = torch.ones(e + shared, dtype=torch.int32, device=dev)
        tensors = dict(logits=logits, bias=bias, mask=mask, fix_routing_mask=fixed, unmapped_topk_idx=given,
                       to_physical_map=pmap, logical_count=count)
        params = dict(num_topk=k, num_groups=groups or 1, num_topk_groups=topk_groups or 1, num_shared=shared,
                      num_ep_ranks=4, tp_rank=1, num_tp_ranks=2, scoring=scoring, routed_scaling_factor=1.5,
                      ep_rank=0, num_dups=33)
        outs = ops.top2_sum_gate(**tensors, **params)
        un = given.clone()
        idx, w = tk1.moe.top2_sum_gate(logits, bias, k, topk_groups, groups, True, shared, 1.5, 0, 4, 1, 2, scoring,
                                       mask=mask.bool(), fix_routing_mask=fixed.bool(), to_physical_map=pmap,
                                       logical_count=count, unmapped_topk_idx=un)
        same = diff(idx, outs[0]) + diff(w, outs[1]) + diff(un, outs[2])
        print(f"top2_sum_gate {scoring} groups={groups}/{topk_groups} E={e} S={shared} K={k} fixed+map: compat vs ops "
              f"differing {same}; tkgen vs its reference on the device: "
              f"{against_reference('top2_sum_gate', tensors, params, outs)}", flush=True)


def main():
    dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    print("device:", torch.cuda.get_device_name() if dev == "cuda" else dev, flush=True)
    try:
        import tile_kernels.moe as tkm
    except Exception as e:                      # noqa: BLE001
        print("no tile_kernels:", e)
        tkm = None
    for part in (forward, wrapped, backward):
        try:
            part(tkm, dev)
        except Exception as e:                  # noqa: BLE001
            print(part.__name__, "failed:", repr(e)[:1000], flush=True)
    try:
        top2(dev)
    except Exception as e:                      # noqa: BLE001
        print("top2 failed:", repr(e)[:1000], flush=True)


if __name__ == "__main__":
    main()
