"""TileKernels 2.1.0's `tile_kernels.mhc` against `tkgen.compat.tilekernels.mhc`: the same 18 entry points called
the same way on the same inputs, per output whether the bits are equal (else the largest difference and the
number of elements that differ), and the time of each (median of CUDA events around single eager calls, after
warm-up; on the CPU, of perf_counter). A markdown table to stdout.

    python benchmarks/compat_mhc_bits.py                 # on the GPU, with tile_kernels 2.1.0 where it imports
    python benchmarks/compat_mhc_bits.py --device cpu    # tkgen only (tile_kernels needs CUDA), small sizes

Workloads: those of TileKernels' mHC tests (operators-v1.md 7.x, which operators-v2.md 2.19 keeps): m = 4
streams, DeepSeek-V3's hidden size 7168 (4096 for the big fuse, 2560 x 10 layers for the recompute), 2 x 4096
tokens, 16 split-K partials. `--tokens` and `--hidden` override them. Destination-passing outputs are allocated
fresh for each implementation (accumulators from the same start). Where 2.1.0 writes per-SM partial sums
(mhc_head_compute_mix_bwd), the sums over the rows are compared (tkgen writes the whole sum into row 0).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load_theirs(device):
    """tile_kernels.mhc where TileKernels 2.1.0 imports and the device is CUDA; else None and why."""
    if device.type != "cuda":
        return None, "not on CUDA"
    try:
        import tile_kernels
        import tile_kernels.mhc as mhc
    except Exception as e:  # noqa: BLE001  (ImportError, or a CUDA/TileLang error at import)
        return None, f"tile_kernels does not import: {type(e).__name__}: {e}"
    version = getattr(tile_kernels, "__version__", "?")
    return mhc, f"tile_kernels {version}"


# --- the cases: name -> (inputs(gen), call(mod, inputs) -> {output name: tensor}) ------------------------------

class Cases:
    def __init__(self, device, tokens, hidden, small):
        self.dev, self.t, self.d, self.small = device, tokens, hidden, small
        self.m = 4
        self.m3 = self.m * (self.m + 2)
        self.num_sms = (torch.cuda.get_device_properties(device).multi_processor_count
                        if device.type == "cuda" else 132)

    def randn(self, *shape, gen, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(self.dev)

    def empty(self, *shape, dtype=torch.float32):
        return torch.empty(*shape, dtype=dtype, device=self.dev)

    def all(self):
        t, d, m, m3, bf = self.t, self.d, self.m, self.m3, torch.bfloat16
        n0, n1 = 2, t // 2
        s = self.num_sms
        cases = {}

        def case(name, make, call):
            cases[name] = (make, call)

        case("expand_to_mhc_fwd",
             lambda g: dict(x=self.randn(t, d, gen=g).to(bf)),
             lambda mod, a: _out(mod.expand_to_mhc_fwd(a["x"], o := self.empty(t, m, d, dtype=bf)), o=o))
        case("expand_to_mhc_bwd",
             lambda g: dict(o_grad=self.randn(t, m, d, gen=g).to(bf)),
             lambda mod, a: _out(mod.expand_to_mhc_bwd(a["o_grad"], xg := self.empty(t, d, dtype=bf)), x_grad=xg))
        case("mhc_head_compute_mix_fwd",
             lambda g: dict(x=self.randn(t, m, gen=g), scale=self.randn(1, gen=g), base=self.randn(m, gen=g)),
             lambda mod, a: _out(mod.mhc_head_compute_mix_fwd(a["x"], a["scale"], a["base"], o := self.empty(t, m),
                                                              1e-2), output_mix=o))

        def head_bwd(mod, a):
            xg, sp, bp = self.empty(t, m), self.empty(s, 1), self.empty(s, m)
            mod.mhc_head_compute_mix_bwd(a["g"], a["x"], a["scale"], a["base"], xg, sp, bp, s)
            return {"input_mix_grad": xg, "mhc_scale_grad (rows summed)": sp.sum(0),
                    "mhc_base_grad (rows summed)": bp.sum(0)}
        case("mhc_head_compute_mix_bwd",
             lambda g: dict(x=self.randn(t, m, gen=g), scale=self.randn(1, gen=g), base=self.randn(m, gen=g),
                            g=self.randn(t, m, gen=g)), head_bwd)

        def post_in(g):
            return dict(x=self.randn(n0, n1, d, gen=g).to(bf), r=self.randn(n0, n1, m, d, gen=g).to(bf),
                        p=self.randn(n0, n1, m, 1, gen=g), c=self.randn(n0, n1, m, m, gen=g),
                        d_o=self.randn(n0, n1, m, d, gen=g).to(bf))
        case("mhc_post_fwd", post_in,
             lambda mod, a: {"out": mod.mhc_post_fwd(a["x"], a["r"], a["p"], a["c"])})
        case("mhc_post_bwd", post_in,
             lambda mod, a: dict(zip(("d_x", "d_residual", "d_post_layer_mix", "d_comb_res_mix"),
                                     mod.mhc_post_bwd(a["x"], a["r"], a["p"], a["c"], a["d_o"]))))

        def apply_in(g):
            return dict(x=torch.sigmoid(self.randn(t, m, d, gen=g)).to(bf),
                        mix=torch.softmax(self.randn(t, m, gen=g), -1), og=self.randn(t, d, gen=g).to(bf),
                        start=self.randn(t, m, d, gen=g).to(bf))
        case("mhc_pre_apply_mix_fwd", apply_in,
             lambda mod, a: _out(mod.mhc_pre_apply_mix_fwd(a["x"], a["mix"], o := self.empty(t, d, dtype=bf)), o=o))

        def apply_bwd(mod, a):
            xg = a["start"].clone()
            mg = mod.mhc_pre_apply_mix_bwd(a["og"], a["x"], a["mix"], xg)
            return {"x_grad (accumulated)": xg, "mix_grad": mg}
        case("mhc_pre_apply_mix_bwd", apply_in, apply_bwd)

        def split_in(g):
            x = self.randn(t, m3, gen=g)
            scale, base = self.randn(3, gen=g), self.randn(m3, gen=g)
            post = torch.sigmoid(self.randn(t, m, gen=g)) * 2.0
            return dict(x=x, scale=scale, base=base, post=post, gp=self.randn(t, m, gen=g),
                        gq=self.randn(t, m, gen=g), gc=self.randn(t, m * m, gen=g))

        def split_fwd(mod, a):
            pre, post, comb = self.empty(t, m), self.empty(t, m), self.empty(t, m * m)
            mod.mhc_pre_split_mixes_fwd(a["x"], a["scale"], a["base"], pre, post, comb, 2.0, 1e-2)
            return {"pre_layer_mix": pre, "post_layer_mix": post, "comb_res_mix": comb}

        def split_bwd(mod, a):
            xg, sg, bg = self.empty(t, m3), self.empty(3), self.empty(m3)
            mod.mhc_pre_split_mixes_bwd(a["gp"], a["gq"], a["gc"], a["x"], a["post"], a["scale"], a["base"], xg, sg,
                                        bg, 2.0)
            return {"input_mixes_grad": xg, "mhc_scale_grad": sg, "mhc_base_grad": bg}
        case("mhc_pre_split_mixes_fwd", split_in, split_fwd)
        case("mhc_pre_split_mixes_bwd", split_in, split_bwd)

        def sk_in(g):
            return dict(x=self.randn(t, m, m, gen=g), g=self.randn(t, m, m, gen=g))
        case("mhc_sinkhorn_fwd", sk_in,
             lambda mod, a: _out(mod.mhc_sinkhorn_fwd(a["x"], o := self.empty(t, m, m), 10, 1e-6), out=o))
        case("mhc_sinkhorn_bwd", sk_in,
             lambda mod, a: _out(mod.mhc_sinkhorn_bwd(a["g"], a["x"], o := self.empty(t, m, m), 10, 1e-6),
                                 grad_input=o))

        k = m * d

        def merge_in(g):
            return dict(fn=self.randn(m3, k, gen=g, scale=1e-4), w=self.randn(k, gen=g, scale=0.1) + 1,
                        g=self.randn(m3, k, gen=g, scale=1e-2), fa=self.randn(m3, k, gen=g, scale=1e-3),
                        wa=self.randn(k, gen=g, scale=1e-3))
        case("mhc_fn_normw_merge_fwd", merge_in,
             lambda mod, a: _out(mod.mhc_fn_normw_merge_fwd(a["fn"], a["w"], o := self.empty(m3, k)), out_fn=o))

        def merge_bwd(mod, a):
            fa, wa = a["fa"].clone(), a["wa"].clone()
            mod.mhc_fn_normw_merge_bwd(a["fn"], a["w"], a["g"], fa, wa)
            return {"fn_grad (accumulated)": fa, "normw_grad (accumulated)": wa}
        case("mhc_fn_normw_merge_bwd", merge_in, merge_bwd)

        n_splits = 16

        def partial_in(g, groups=1, hidden=d):
            kk = m * hidden
            r = self.randn(t, groups, n_splits, kk // groups // n_splits, gen=g).to(bf).float()
            f = self.randn(m3, groups, n_splits, kk // groups // n_splits, gen=g, scale=1e-4)
            return dict(oms=torch.einsum("tgsk,ngsk->stgn", r, f).contiguous(),
                        sqs=(r * r).sum(-1).permute(2, 0, 1).contiguous(), gsize=kk // groups,
                        g=self.randn(t, m3, gen=g), r=r.reshape(t, m, hidden).to(bf),
                        scale=self.randn(3, gen=g, scale=0.1), base=self.randn(m3, gen=g, scale=0.1))

        def rms_fwd(mod, a):
            om, sq, o = self.empty(t, 1, m3), self.empty(t, 1), self.empty(t, m3)
            mod.mhc_reduce_partials_and_rmsnorm_fwd(a["oms"], a["sqs"], om, sq, o, a["gsize"], 1e-6, n_splits)
            return {"out_mul": om, "sqrsum": sq, "out": o}

        def rms_bwd(mod, a):
            om, sq = a["oms"].sum(0), a["sqs"].sum(0)
            omg, sqg = self.empty(t, 1, m3), self.empty(t, 1)
            mod.mhc_reduce_partials_and_rmsnorm_bwd(a["g"], om, sq, omg, sqg, a["gsize"], 1e-6)
            return {"out_mul_grad": omg, "sqrsum_grad": sqg}
        case("mhc_reduce_partials_and_rmsnorm_fwd", partial_in, rms_fwd)
        case("mhc_reduce_partials_and_rmsnorm_bwd", partial_in, rms_bwd)

        d_fuse = 1280 if self.small else 4096

        def fuse(mod, a):
            post, comb, li = self.empty(t, m), self.empty(t, m * m), self.empty(t, d_fuse, dtype=bf)
            mod.mhc_pre_big_fuse_fwd(a["oms"][:, :, 0].contiguous(), a["sqs"][:, :, 0].contiguous(), a["scale"],
                                     a["base"], a["r"], post, comb, li, 1e-6, 1e-6, 1e-6, 1.0, 10, n_splits)
            return {"post_mix": post, "comb_mix": comb, "layer_input": li}
        case("mhc_pre_big_fuse_fwd", lambda g: partial_in(g, hidden=d_fuse), fuse)

        layers, posts, d_rec = (3, 2, 1280) if self.small else (10, 9, 2560)

        def rec_in(g):
            return dict(init=self.randn(1, t, m, d_rec, gen=g).to(bf),
                        pre=[torch.softmax(self.randn(1, t, m, 1, gen=g), -2) for _ in range(layers)],
                        outs=[self.randn(1, t, d_rec, gen=g).to(bf) for _ in range(posts)],
                        post=[torch.sigmoid(self.randn(1, t, m, 1, gen=g)) * 2 for _ in range(posts)],
                        comb=[torch.softmax(self.randn(1, t, m, m, gen=g), -1) for _ in range(posts)])

        def rec(mod, a):
            li = [self.empty(1, t, d_rec, dtype=bf) for _ in range(layers)]
            rs = [self.empty(1, t, m, d_rec, dtype=bf) for _ in range(posts)]
            mod.mhc_multilayer_recompute(a["init"], a["pre"], a["outs"], a["post"], a["comb"], li, rs)
            return {f"layer_input[0..{layers - 1}]": torch.stack(li), f"residual[0..{posts - 1}]": torch.stack(rs)}
        case("mhc_multilayer_recompute", rec_in, rec)
        return cases


def _out(ret, **outs):
    assert ret is None, "a destination-passing entry point returned a value"
    return outs


# --- comparison and timing -------------------------------------------------------------------------------------

def compare(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype differ: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
    ia = a.contiguous().view(torch.uint8) if a.element_size() == 1 else a.contiguous().view(
        {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()])
    ib = b.contiguous().view(ia.dtype)
    differ = int((ia != ib).sum())
    if differ == 0:
        return "equal bits"
    diff = (a.double() - b.double()).abs()
    diff = diff[torch.isfinite(diff)]
    worst = float(diff.max()) if diff.numel() else float("nan")
    return f"{differ} of {a.numel()} differ (max abs diff {worst:.3g})"


def timed(fn, device, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) * 1e3)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=None, help="tokens (default 8192 on CUDA, 64 on the CPU)")
    ap.add_argument("--hidden", type=int, default=None, help="hidden size (default 7168 on CUDA, 1280 on the CPU)")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--only", default="", help="comma-separated entry points")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    small = device.type != "cuda"
    tokens = args.tokens or (64 if small else 8192)
    hidden = args.hidden or (1280 if small else 7168)
    warmup = args.warmup if args.warmup is not None else (1 if small else 10)
    reps = args.reps if args.reps is not None else (3 if small else 50)

    import tkgen.compat.tilekernels.mhc as ours
    theirs, why = load_theirs(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"# tile_kernels.mhc vs tkgen.compat.tilekernels.mhc on {name}\n")
    print(f"tokens {tokens}, hidden {hidden}, m 4; times: median of {reps} eager calls after {warmup} warm-up "
          f"({'CUDA events' if device.type == 'cuda' else 'perf_counter'}), in us. TileKernels: {why}.\n")
    print("| entry point | output | bits | tile_kernels us | tkgen us |")
    print("|---|---|---|---|---|")

    only = {s for s in args.only.split(",") if s}
    for ep, (make, call) in Cases(device, tokens, hidden, small).all().items():
        if only and ep not in only:
            continue
        inputs = make(torch.Generator().manual_seed(2101))
        try:
            got = call(ours, inputs)
            t_ours = f"{timed(lambda: call(ours, inputs), device, warmup, reps):.1f}"
        except Exception as e:  # noqa: BLE001  (reported in the table)
            got, t_ours = None, f"error: {type(e).__name__}: {e}"[:120]
        want, t_theirs = None, "-"
        if theirs is not None:
            try:
                want = call(theirs, inputs)
                t_theirs = f"{timed(lambda: call(theirs, inputs), device, warmup, reps):.1f}"
            except Exception as e:  # noqa: BLE001
                t_theirs = f"error: {type(e).__name__}: {e}"[:120]
        names = list((got or want or {"-": None}).keys())
        for i, out in enumerate(names):
            if got is not None and want is not None:
                bits = compare(want[out], got[out])
            elif got is not None:
                bits = "tkgen only"
            else:
                bits = "-"
            first = i == 0
            print(f"| {ep if first else ''} | {out} | {bits} | {t_theirs if first else ''} | "
                  f"{t_ours if first else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
