"""Host cost of eager calls: what a training loop without CUDA graphs pays per call on the host.

    python benchmarks/host_cost.py [--device cpu|cuda] [--ops OP,...] [--bound R] [--out DIR]

Each op is called through `tkgen.ops` on a tiny input (one row of its first workload; the issue's
`per_token_cast` 1 x 128 and `topk_gate` 1 x 8, k = 2, as written below), and TileKernels 2.1.0 on the same
input where it runs, alternating with `torch.add` of two one-element tensors in the same run. The time
per call is the eager time of `tkgen.tools.bench.time_fn` (CUDA events around batches of back-to-back calls; on
a tiny input the host is the bottleneck), and `host` its wall clock before waiting for the device.

`--bound R` (the CPU check): exit 1 if a call of a small op (SMALL below) costs more than R `torch.add`
calls. On the CPU a tiny kernel runs in about a microsecond, so this holds the host path of tkgen itself.
`anchors()` times the issue's anchor workloads eager and under CUDA graphs, tkgen against TileKernels.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tkgen import registry  # noqa: E402
from tkgen.tools.bench import _load_adapters, bench_op, time_fn, workload_inputs

ADAPTERS = Path(__file__).resolve().parent / "competitors.py"
SMALL = {"per_token_cast": ({"T": 1, "H": 128}, {"group": 128}), "topk_gate": ({"T": 1, "E": 8}, {"k": 2})}
ANCHORS = [("per_token_cast", "deepseek-v3 hidden"), ("swiglu_forward_and_per_token_cast", "moe expert ffn"),
           ("topk_gate", "deepseek-v3 router"), ("cast_back", "deepseek-v3 hidden")]
ROUNDS = 5


def tiny_workload(name):
    """The op's first workload with one row (or the small input named in SMALL)."""
    from tkgen.driver import load_catalog
    spec = load_catalog(registry.specs_dir()).op(name)
    wl = dict(spec.workloads[0]) if spec.workloads else {"dims": {}, "params": {}}
    dims, params = dict(wl.get("dims", {})), dict(wl.get("params", {}))
    if name in SMALL:
        dims, extra = SMALL[name]
        params.update(extra)
    elif spec.dynamic_dim:
        dims[spec.dynamic_dim] = 1
    return {**wl, "name": "tiny", "dims": dims, "params": params}


def calls(name, device, adapters):
    """{impl: call or the reason it cannot run} on the op's tiny input."""
    pkg = registry.op_package(name)
    wl = tiny_workload(name)
    sets, params = workload_inputs(pkg, wl, device, 1)
    inputs = sets[0]
    fn = getattr(pkg, name)
    out = {"tkgen": lambda: fn(**inputs, **params)}
    adapter = adapters.get("tilekernels", {}).get(name)
    try:
        if adapter is None:
            raise NotImplementedError("no TileKernels adapter")
        tk = adapter(params, {**wl["dims"], **{k: v for k, v in params.items() if isinstance(v, int)}})
        args = [inputs[i.name] for i in pkg.OP.inputs]
        tk(*args)
        out["tilekernels"] = lambda: tk(*args)
    except Exception as e:  # noqa: BLE001  (TileKernels missing here, or it has no kernel for this case)
        out["tilekernels"] = f"{type(e).__name__}: {str(e)[:100]}"
    return wl, out


def measure(names, device, reps=20, log=print):
    """Rows of {op, workload, impl, eager_us, host_us, add_us, ratio} (ratio: eager time over torch.add's)."""
    adapters = _load_adapters(ADAPTERS)
    a, b = torch.ones(1, device=device), torch.ones(1, device=device)
    rows = []
    for name in names:
        wl, impls = calls(name, device, adapters)
        timed = {k: v for k, v in impls.items() if callable(v)}
        series = {k: ([], []) for k in [*timed, "torch.add"]}
        for _ in range(ROUNDS):
            for k, fn in [*timed.items(), ("torch.add", lambda: torch.add(a, b))]:
                host = series[k][1]
                series[k][0].append(time_fn([fn], device, reps=reps, batch=50, graph=False, host=host)[0])
        add = statistics.median(series["torch.add"][0])
        dims = ",".join(f"{k}={v}" for k, v in wl["dims"].items())
        for k, v in impls.items():
            row = {"op": name, "workload": dims, "impl": k, "add_us": add}
            if callable(v):
                t = statistics.median(series[k][0])
                row.update(eager_us=t, host_us=statistics.median(series[k][1]), ratio=t / add)
            else:
                row["note"] = v
            rows.append(row)
            log(table_row(row))
    return rows


def anchors(device, reps=20, log=print):
    """The issue's anchor workloads, eager and under CUDA graphs, tkgen against TileKernels (bench rows)."""
    adapters = _load_adapters(ADAPTERS)
    results = []
    for name, workload in ANCHORS:
        results += bench_op(name, device, ["tilekernels"], adapters, reps=reps, log=log, workloads=[workload])
    return results


HEADER = "| op | input | impl | eager (µs) | host (µs) | torch.add (µs) | ratio to torch.add | note |\n" \
         "|---|---|---|---|---|---|---|---|"


def table_row(r):
    if "eager_us" not in r:
        return f"| {r['op']} | {r['workload']} | {r['impl']} | – | – | {r['add_us']:.2f} | | {r.get('note', '')} |"
    return (f"| {r['op']} | {r['workload']} | {r['impl']} | {r['eager_us']:.2f} | {r['host_us']:.2f} | "
            f"{r['add_us']:.2f} | {r['ratio']:.1f} | |")


def anchor_table(results):
    by = {}
    for r in results:
        by.setdefault((r.op, r.workload), {})[r.impl] = r
    lines = ["| call | tkgen eager | TileKernels eager | tkgen, CUDA graph | TileKernels, CUDA graph |",
             "|---|---|---|---|---|"]
    us = lambda r, f: "–" if r is None or getattr(r, f) is None else f"{getattr(r, f):.1f} µs"  # noqa: E731
    for (op, wl), impls in by.items():
        mine, tk = impls.get("tkgen"), impls.get("tilekernels")
        lines.append(f"| {op} {wl} | {us(mine, 'eager_us')} | {us(tk, 'eager_us')} | {us(mine, 'time_us')} | "
                     f"{us(tk, 'time_us')} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--ops", default=None, help="comma-separated ops (default: SMALL on the CPU, every op on CUDA)")
    ap.add_argument("--bound", type=float, default=None, help="fail if a SMALL op costs more than this many torch.add")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None, help="write host_cost.json there")
    args = ap.parse_args(argv)
    registry.use_generated()
    device = torch.device(args.device)
    names = args.ops.split(",") if args.ops else list(SMALL) if device.type == "cpu" else sorted(registry.op_modules())
    print(HEADER)
    rows = measure(names, device, reps=args.reps)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "host_cost.json").write_text(json.dumps(rows, indent=1))
    if args.bound is not None:
        over = [r for r in rows if r["impl"] == "tkgen" and r["op"] in SMALL and r["ratio"] > args.bound]
        for r in over:
            print(f"{r['op']}: {r['eager_us']:.2f} µs per call is {r['ratio']:.1f} torch.add calls, above the "
                  f"bound of {args.bound}", file=sys.stderr)
        return 1 if over else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
