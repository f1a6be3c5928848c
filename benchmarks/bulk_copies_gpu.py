"""The pass `bulk_copies` on the GPU: rmsnorm_backward and per_channel_cast with the pass off and on.

Run on a CUDA machine (an H100 or H200, tile_kernels 2.1.0 installed for the comparison):
    python benchmarks/bulk_copies_gpu.py
TKGEN_BULK_COPIES lists the pass's settings to time besides off, `max_copies[:instruction][@stages]` each
(default `8,8:cp_async,8:tma,8@2,8@3,8:cp_async@2`: TileLang's choice, cp.async, TMA, then the loops whose
tiles start with the copies software-pipelined by the pass `pipeline_copies` with 2 or 3 stages; a setting
TileLang cannot build is reported and skipped: rmsnorm_backward's one-float rstd rows are too small for TMA).
Only rmsnorm_backward has such a loop (its persistent loop over row tiles); per_channel_cast's row groups are
a parallel axis of its block, so its `@stages` settings time the same kernels as without.

For each op at its spec workload (8192 x 7168 bf16; per_channel_cast in groups of 128 tokens) the kernels are
generated for the profile with the op's tuned schedule and the pass off and at each setting (as
`tkgen tune` generates a candidate's kernels: nothing is written into the package), each checked against
the reference, and timed as `tkgen bench` times: a CUDA graph of a batch of calls over rotated input sets
(beyond the L2 cache), and eager calls through the op's public entry point. The outputs with the pass on
and off, on the same inputs, must be bit-identical (the pass stages the same elements; the exit status is 1 if not).
TileKernels 2.1.0 is timed on the same inputs where it is installed. Writes bulk_copies.json and the
table under $OUT (default ./gpu-out).

TKGEN_BULK_OPS: a comma-separated subset of the two ops to run.

A dry run of the script on a CPU machine (256 rows, the C kernels, no timing worth reading):
    TKGEN_GPU_DEVICE=cpu TKGEN_REPS=1 python benchmarks/bulk_copies_gpu.py
"""
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tkgen import registry  # noqa: E402
from tkgen.driver import load_catalog  # noqa: E402
from tkgen.runtime.fastpath import site_of  # noqa: E402
from tkgen.runtime.kernels import substituted  # noqa: E402
from tkgen.runtime.ops import arch_for  # noqa: E402
from tkgen.testing.check import check_tensors  # noqa: E402
from tkgen.tools.bench import _load_adapters, copy_bandwidth, time_fn, workload_impls  # noqa: E402
from tkgen.tools.bench_cli import DEFAULT_ADAPTERS, candidate_kernels  # noqa: E402

OUT = Path(os.environ.get("OUT", "gpu-out"))
CASES = [("rmsnorm_backward", "deepseek-v3 hidden"), ("per_channel_cast", "deepseek-v3 hidden")]
if os.environ.get("TKGEN_BULK_CASES"):       # op:workload,... (ops and workloads besides the two above)
    CASES = [tuple(c.split(":", 1)) for c in os.environ["TKGEN_BULK_CASES"].split(",")]
if os.environ.get("TKGEN_BULK_OPS"):          # a comma-separated subset of the ops above
    CASES = [c for c in CASES if c[0] in os.environ["TKGEN_BULK_OPS"].split(",")]
MODES = {"off": (0, "", 0)}
for _m in os.environ.get("TKGEN_BULK_COPIES", "8,8:cp_async,8:tma,8@2,8@3,8:cp_async@2").split(","):
    _m1, _, _stages = _m.partition("@")
    _n, _, _inst = _m1.partition(":")
    MODES[f"on ({_m})"] = (int(_n), _inst, int(_stages or 0))
ROUNDS, REPS = 3, int(os.environ.get("TKGEN_REPS", "10"))


def log(*a):
    print(*a, flush=True)


def candidate(tuned: dict, copies: int, instruction: str = "", stages: int = 0) -> dict:
    """The op's tuned schedule on the profile as a `tkgen tune` candidate (which replaces it), plus the
    passes' parameters: `block: {t: 4}` as block_t, `pass_params` as pass.param, knobs as they are."""
    cand = {}
    for k, v in tuned.items():
        if k == "block":
            cand.update({f"block_{a}": n for a, n in v.items()})
        elif k == "pass_params":
            cand.update({f"{p}.{q}": x for p, params in v.items() for q, x in params.items()})
        else:
            cand[k] = v
    extra = {"bulk_copies.instruction": instruction} if instruction else {}
    if stages:
        extra["pipeline_copies.stages"] = stages
    return {**cand, "bulk_copies.max_copies": copies, **extra}


def bits(t):
    return t.contiguous().view(torch.uint8)


def timed(fns, device, graph):
    """Median over ROUNDS rounds of time_fn's median (µs per call)."""
    return statistics.median(time_fn(fns, device, reps=REPS, graph=graph)[0] for _ in range(ROUNDS))


def run_case(cat, name, wl_name, arch, device, adapters, workdir, failed):
    spec, pkg = cat.op(name), registry.op_package(name)
    wl = next(w for w in spec.workloads if w["name"] == wl_name)
    tuned = cat.archs[arch].tuned.get(name, {})
    rows, outs, mismatch = [], {}, False
    for mode, (copies, instruction, stages) in MODES.items():
        cand = candidate(tuned, copies, instruction, stages)
        kernels = candidate_kernels(cat, spec, pkg, arch, cand, workdir)
        text = open(kernels.module.__file__).read()
        staged, pipelined = text.count("T.copy("), text.count("T.Pipelined(")
        site_of(pkg.OP).specializations.clear()      # the eager path keeps its kernels per shape class
        with substituted(pkg, arch, kernels):
            try:
                w = workload_impls(name, wl, device, ["tilekernels"] if mode == "off" else [], adapters)
                got, _ = check_tensors(name, w["inputs"], dict(w["params"]), arch=arch)
            except Exception as e:  # noqa: BLE001  (a setting TileLang cannot build, or a mismatch: reported)
                if mode == "off":
                    raise
                mismatch |= isinstance(e, AssertionError)
                log(f"  {name} bulk copies {mode}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                failed.append(f"{name} {mode}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                site_of(pkg.OP).specializations.clear()
                continue
            outs[mode] = [o.clone() for o in got]
            for impl, x in w["impls"].items():
                if x.fns is None:
                    log(f"  {name} {impl}: skipped ({x.note})")
                    continue
                label = f"tkgen, bulk copies {mode}" if impl == "tkgen" else impl
                graph_us = timed(x.fns, device, True)
                eager_us = timed(x.eager, device, False)
                rows.append(dict(op=name, workload=w["label"], impl=label, graph_us=graph_us, eager_us=eager_us,
                                 nbytes=w["nbytes"], copies_in_source=staged if impl == "tkgen" else None,
                                 pipelined_in_source=pipelined if impl == "tkgen" else None,
                                 schedule=cand if impl == "tkgen" else None))
                log(f"  {name} {label}: graph {graph_us:.1f} µs, eager {eager_us:.1f} µs")
        site_of(pkg.OP).specializations.clear()
    same = all(len(outs["off"]) == len(o) and all(torch.equal(bits(a), bits(b)) for a, b in zip(outs["off"], o))
               for o in outs.values()) and not mismatch
    if len(outs) < 2 and not mismatch:
        same = None                                # no setting with the pass on ran: nothing compared
    for r in rows:
        r["bit_identical_off_on"] = same
    log(f"  {name}: outputs with the passes off and on bit-identical: {same}")
    return rows, same


def table(rows, copy_gbps, device_name) -> str:
    out = [f"bulk_copies on {device_name} (copy {copy_gbps:.0f} GB/s); µs per call, median of {ROUNDS} rounds",
           "", "| op | workload | implementation | CUDA graph µs | eager µs | % of copy (graph) | vs TileKernels "
           "(graph) | T.copy in source | T.Pipelined in source | off = on bits |", "|" + "---|" * 10]
    tk = {r["op"]: r for r in rows if r["impl"] == "tilekernels"}
    for r in rows:
        pct = 100 * r["nbytes"] / (r["graph_us"] * 1e-6) / 1e9 / copy_gbps
        ratio = f"{r['graph_us'] / tk[r['op']]['graph_us']:.2f}x" if r["op"] in tk else "-"
        out.append(f"| {r['op']} | {r['workload']} | {r['impl']} | {r['graph_us']:.1f} | {r['eager_us']:.1f} | "
                   f"{pct:.0f}% | {ratio} | {r['copies_in_source'] if r['copies_in_source'] is not None else '-'} | "
                   f"{r.get('pipelined_in_source') if r.get('pipelined_in_source') is not None else '-'} | "
                   f"{ {True: 'yes', False: 'NO', None: '-'}[r['bit_identical_off_on']]} |")
    return "\n".join(out)


def main():
    device = torch.device(os.environ.get("TKGEN_GPU_DEVICE", "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        log("no CUDA device here")
        return 2
    arch = arch_for(device)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (a dry run)"
    OUT.mkdir(parents=True, exist_ok=True)
    cat = load_catalog(registry.specs_dir())
    adapters = _load_adapters(str(DEFAULT_ADAPTERS))
    copy_gbps = copy_bandwidth(device)
    log(f"{device_name}, profile {arch}, copy {copy_gbps:.0f} GB/s; modes {MODES}")
    workdir = tempfile.mkdtemp(prefix="tkgen-bulk-copies-")
    rows, ok, failed = [], True, []
    for name, wl_name in CASES:
        r, same = run_case(cat, name, wl_name, arch, device, adapters, workdir, failed)
        rows += r
        ok &= same is not False
    text = table(rows, copy_gbps, device_name) + "".join(f"\n\nnot timed: {f}" for f in failed)
    log("\n" + text)
    (OUT / "bulk_copies.md").write_text(text + "\n")
    (OUT / "bulk_copies.json").write_text(json.dumps(dict(device=device_name, arch=arch, copy_gbps=copy_gbps,
                                                          rows=rows, failed=failed), indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
