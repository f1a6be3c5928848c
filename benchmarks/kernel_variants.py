"""Timed variants of generated kernels against each other and TileKernels, on one GPU.

A variant is the generated kernel module of the sm90 profile (its knob table's knobs) with textual edits (grid order, unrolled top-k rounds, pass
configs) and a schedule; each is checked bit for bit against the generated kernel's output and timed
alternately with the others. This is how the lowering choices in docs/performance.md were measured:
    . .gpu/env.sh && python3 benchmarks/kernel_variants.py
"""
import importlib
import importlib.util
import os
import re
import statistics
import sys
import tempfile

import torch
import tkgen.registry as registry
registry.use_generated()
import tilelang
from tkgen.tools.bench import time_fn, copy_bandwidth, workload_inputs
from tkgen.runtime.fastpath import prepare
from tkgen.runtime.kernels import kernel_module

dev = torch.device("cuda")
rows = []

def variant_module(base, edits, name):
    """`base` (a module, or the path of a kernel module's source) with regex `edits` applied."""
    src = open(base if isinstance(base, str) else base.__file__).read().replace("from ...common.", "from tkgen_generated.common.")
    for a, b in edits:
        n = len(re.findall(a, src))
        assert n, (a, name)
        src = re.sub(a, b, src)
    path = os.path.join(tempfile.mkdtemp(), re.sub(r"\W", "_", name) + ".py")   # TileLang reads the source file
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location(re.sub(r"\W", "_", name), path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m

GRID_2D = (r"with T\.Kernel\(T\.ceildiv\(N_t, B_t\) \* T\.ceildiv\(N_g, B_g\), threads=threads\) as \(pid,\):\n"
           r"\s+b_t = pid // \(T\.ceildiv\(N_g, B_g\)\)\n\s+b_g = pid % T\.ceildiv\(N_g, B_g\)",
           "with T.Kernel(T.ceildiv(N_t, B_t), T.ceildiv(N_g, B_g), threads=threads) as (b_t, b_g):")
# pass configs of a variant: a module's own PASS_CONFIGS are added to its knob table's (compile_variant)
PRED = (r"\Z", "\nPASS_CONFIGS = {'tl.enable_lower_ldgstg_predicated': True}\n")
# Earlier top-k lowerings, where a copy of their generated module is at hand (for example
# `git show 59bb84e:generated/moe/topk_gate/kernel_sm90.py > .gpu/topk_two_reductions_sm90.py`).
EARLIER_TOPK = [("max+argmin unroll t1 th32", ".gpu/topk_two_reductions_sm90.py", [(r"T\.serial\(N_j\)", "T.unroll(N_j)")]),
                ("packed, retire by key t1 th32", ".gpu/topk_packed_v1_sm90.py", [])]
SERIAL = (r"\(T\.unroll if N_j <= 16 else T\.serial\)\(N_j\)", "T.serial(N_j)")


def compile_variant(m, table, factory, args, sched):
    """Variant module `m`'s factory under the knob table's knobs (overridden by `sched`) and target."""
    prim = getattr(m, factory)(*args, **{**table.KNOBS[factory], **sched})
    configs = {**table.PASS_CONFIGS, **getattr(m, "PASS_CONFIGS", {})}
    return tilelang.compile(prim, target=table.TARGET, pass_configs=configs)

def bench(opname, factory, args, wl_index, variants, tk_fn, nbytes_fn):
    pkg = registry.op_package(opname)
    base, table = kernel_module(pkg, "sm90")
    from tkgen.driver import load_catalog
    wl = dict(load_catalog(registry.specs_dir()).op(opname).workloads[wl_index])
    sets, params = workload_inputs(pkg, wl, dev, 4)
    launch0, ref = prepare(pkg.OP, sets[0], params, arch="sm90")
    launch0(); torch.cuda.synchronize()
    ref = [r.clone() for r in ref]
    nbytes = nbytes_fn(sets[0], ref)
    fns_by = {}
    for vname, edits, sched in variants:
        try:
            m = variant_module(edits[0], edits[1:], vname) if edits and isinstance(edits[0], str) else (
                variant_module(base, edits, vname) if edits else base)
            k = compile_variant(m, table, factory, args, sched)
        except Exception as e:
            rows.append((opname, wl["name"], vname, f"build failed {str(e)[:80]}", "", "")); continue
        launches = []
        for s in sets:
            outs = [torch.empty_like(r) for r in ref]
            launches.append((lambda k=k, s=s, outs=outs: k(*s.values(), *outs), outs))
        launches[0][0](); torch.cuda.synchronize()
        ok = all(torch.equal(a.view(torch.uint8).cpu(), b.view(torch.uint8).cpu()) for a, b in zip(launches[0][1], ref))
        fns_by[vname] = ([l for l, _ in launches], ok)
    if tk_fn is not None:
        try:
            f = tk_fn(params, wl["dims"])
            fns_by["tilekernels"] = ([lambda s=s: f(*s.values()) for s in sets], None)
        except Exception as e:
            rows.append((opname, wl["name"], "tilekernels", f"skipped {e}", "", ""))
    times = {v: [] for v in fns_by}
    for rnd in range(3):   # alternate implementations, median of the rounds
        for v, (fns, ok) in fns_by.items():
            t, spread, _ = time_fn(fns, dev, reps=15)
            times[v].append(t)
    for v, (fns, ok) in fns_by.items():
        t = statistics.median(times[v])
        rows.append((opname, wl["name"], v, f"{t:.2f}", f"{nbytes / t / 1e3:.0f}", "bit-exact" if ok else ("" if ok is None else "MISMATCH")))

sys.path.insert(0, "benchmarks")
from competitors import ADAPTERS
tk = ADAPTERS["tilekernels"]
copy = copy_bandwidth(dev)
print(f"copy {copy:.0f} GB/s", flush=True)
nb_ptc = lambda s, outs: sum(t.numel() * t.element_size() for t in list(s.values()) + list(outs))
ONLY = os.environ.get("KV_OPS", "per_token_cast,topk_gate").split(",")
for wl, H in ((0, 7168), (1, 2560)) if "per_token_cast" in ONLY else ():
    bench("per_token_cast", "build_e4m3_fp32", (H, 128, "bf16"), wl, [
        ("flat t4 th64 te2048 (tuned)", [], dict(threads=64, block_t=4, tile_elems=2048)),
        ("2d t4 th64 te2048", [GRID_2D], dict(threads=64, block_t=4, tile_elems=2048)),
        ("flat t1 th32 te2048", [], dict(threads=32, block_t=1, tile_elems=2048)),
        ("flat t4 th128 te4096", [], dict(threads=128, block_t=4, tile_elems=4096)),
        ("flat+pred t4 th64 te2048", [PRED], dict(threads=64, block_t=4, tile_elems=2048)),
    ], tk["per_token_cast"], nb_ptc)
for wl, (E, k) in ((0, (256, 8)), (1, (72, 6))) if "topk_gate" in ONLY else ():
    bench("topk_gate", "build_base", (E, k), wl, [
        ("unroll t1 th32 (tuned)", [], dict(threads=32, block_t=1)),
        ("serial t1 th32", [SERIAL], dict(threads=32, block_t=1)),
        ("unroll+pred t1 th32", [PRED], dict(threads=32, block_t=1)),
        ("unroll t2 th32", [], dict(threads=32, block_t=2)),
    ] + [(label, [path, *edits], dict(threads=32, block_t=1)) for label, path, edits in EARLIER_TOPK
         if os.path.exists(path)], tk["topk_gate"], nb_ptc)
print("\n| op | workload | variant | µs | GB/s | check |\n|---|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(map(str, r)) + " |")
