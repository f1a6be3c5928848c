"""Which rounding of SwiGLU backward's gate factor TileKernels 2.1.0 uses, read off its bits on a GPU.

    python benchmarks/swiglu_backward_v2_bits.py [--device cuda]

The first release rounds `1 + a * (1 - s)` once (a fused multiply-add; tkgen's `da_fma=True`, which
tkgen.compat.tilekernels_v1 passes). For 2.1.0, tkgen.compat.tilekernels passes tkgen's default
(`da_fma=False`: the product and the sum rounded apart). This calls `tile_kernels.quant.
swiglu_backward_and_per_token_cast` (2.1.0) and tkgen's op both ways on the same inputs, with and without
a clamp, and prints how many elements of each output differ from TileKernels' in each form.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tkgen.ops as ops  # noqa: E402


def inputs(tokens, hidden, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(tokens, 2 * hidden, generator=g) * 4
    q_f32 = x.view(tokens, -1, 128)
    sf = q_f32.abs().amax(-1).clamp_min(1e-4) / 448.0
    q = (q_f32 / sf.unsqueeze(-1)).view(tokens, 2 * hidden).to(torch.float8_e4m3fn)
    grad = (torch.randn(tokens, hidden, generator=g)).to(torch.bfloat16)
    return q.to(device), sf.to(device).contiguous(), grad.to(device)


def differing(a, b):
    if a.dtype in (torch.bfloat16, torch.float8_e4m3fn):
        a, b = a.view(torch.uint8 if a.element_size() == 1 else torch.int16), \
            b.view(torch.uint8 if b.element_size() == 1 else torch.int16)
    elif a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    return int((a != b).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import tile_kernels as tk
    print("| case | output | elements | differ (da_fma=False) | differ (da_fma=True) |\n|---|---|---|---|---|")
    for clamp in (None, 10.0):
        q, sf, grad = inputs(4096, 2048, args.device, 3)
        theirs = tk.quant.swiglu_backward_and_per_token_cast((q, sf), grad, "e4m3", 128, clamp_value=clamp)
        print(f"<!-- TileKernels returned {[type(t).__name__ for t in theirs]} -->")
        x_grad_t, (fp8_t, sf_t) = theirs[0], theirs[1]
        ours = {fma: ops.swiglu_backward_and_per_token_cast(q, sf, grad, 128, clamp=clamp, da_fma=fma)
                for fma in (False, True)}
        for name, t, i in (("x_grad", x_grad_t, 0), ("x_grad_fp8", fp8_t, 1), ("x_grad_sf", sf_t, 2)):
            counts = [differing(ours[f][i], t) for f in (False, True)]
            print(f"| clamp {clamp} | {name} | {t.numel()} | {counts[0]} | {counts[1]} |")


if __name__ == "__main__":
    main()
