"""One full GPU session: property tests on CUDA, anchor and odd shapes bit for bit, tuning, benchmarks.

Run on the lent H200 as:  . .gpu/env.sh && python benchmarks/gpu_session.py
A dry run of any phase on a CPU machine:  TKGEN_GPU_DEVICE=cpu TKGEN_GPU_PHASES=eager python benchmarks/gpu_session.py
Writes logs, bench.json/bench.md/roofline.png and tuned arch profiles under $OUT (or ./gpu-out).
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tkgen import registry  # noqa: E402
from tkgen.testing import check as C  # noqa: E402

OUT = Path(os.environ.get("OUT", "gpu-out"))
OUT.mkdir(parents=True, exist_ok=True)
EXAMPLES = int(os.environ.get("TKGEN_GPU_EXAMPLES", "12"))
WORKERS = int(os.environ.get("TKGEN_GPU_WORKERS", "14"))
# props: DRAWS cases drawn per op, those of its first SPECS specializations kept (see `props`), PROCS
# child processes sharing the GPU
DRAWS = int(os.environ.get("TKGEN_GPU_DRAWS", "0")) or EXAMPLES
SPECS = int(os.environ.get("TKGEN_GPU_SPECS", "0")) or EXAMPLES
PROCS = int(os.environ.get("TKGEN_GPU_PROCS", "1"))
# seconds after which the precompile starts no more builds (the checks then compile what they lack)
PRECOMPILE_WITHIN = float(os.environ.get("TKGEN_GPU_PRECOMPILE_WITHIN", "0")) or None
DEVICE = os.environ.get("TKGEN_GPU_DEVICE", "cuda")       # cpu: a dry run of the script on a CPU machine
ARCH = "sm90" if DEVICE == "cuda" else "cpu"
PHASES = os.environ.get("TKGEN_GPU_PHASES", "anchors,saturation,determinism,eager,props,tune,bench").split(",")
# Which ops the props, tune and bench phases cover (default: every generated op), and bench's competitors.
OPS = [o for o in os.environ.get("TKGEN_GPU_OPS", "").split(",") if o]
AGAINST = os.environ.get("TKGEN_GPU_AGAINST", "torch,compile,tilekernels")
TMP = Path(os.environ.get("TKGEN_GPU_TMP", "/tmp/tkgen-gpu-session"))      # scratch, not sent back
TMP.mkdir(parents=True, exist_ok=True)
CASES, RESULTS = TMP / "props_cases.json", TMP / "props_results.jsonl"
summary = []


def log(*a):
    print(*a, flush=True)


def anchor_case(op, dims, params, dtypes, seed=7, style="normal", specials=()):
    pkg = registry.op_package(op)
    env = {**dims, **params}
    return {"dims": dims, "params": params,
            "shapes": {i.name: list(i.shape_fn(env)) for i in pkg.OP.inputs},
            "inputs": {i.name: {"dtype": dtypes.get(i.name, i.dtypes[0]), "seed": seed, "scale_exp": 0,
                                "style": style, "specials": [list(s) for s in specials]} for i in pkg.OP.inputs}}


def precompile_cases(by_op):
    """Build every case's kernel specialization at once, in worker processes (compiling dominates)."""
    from tkgen.runtime.compile import precompile
    jobs = []
    for op, cases in by_op.items():
        pkg = registry.op_package(op)
        for case in cases:
            variant, statics, dtypes = C.specialization(pkg.OP, case)
            jobs.append((pkg.__name__, ARCH, variant, statics + dtypes, None))
    t = time.time()
    errs = precompile(jobs, workers=WORKERS, within=PRECOMPILE_WITHIN)
    log(f"  precompiled {len(set(jobs))} specializations of {len(by_op)} ops in {time.time() - t:.0f} s; "
        f"errors: {errs[:3]}")


def ops():
    return OPS or sorted(registry.op_modules())


def resilient(name, ops_, command, done, timeout):
    """Run `command(ops left)` in child processes until every op is done: a child that dies (a kernel's
    illegal access poisons its CUDA context) or hangs loses only the op it was on, which is reported."""
    left, stuck = list(ops_), 0
    while left:
        with open(OUT / f"{name}.log", "a") as f:
            try:
                rc = subprocess.run(command(left), stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        finished = done()
        after = [o for o in left if o not in finished]
        if after and rc == 0:
            break
        stuck = stuck + 1 if len(after) == len(left) else 0
        if stuck >= 2:          # twice no op finished: the child fails before any op (imports, no GPU)
            log(f"{name}: the child stopped ({rc}) twice without finishing an op; giving up on {after}")
            summary.append((name, "all", f"child fails before any op ({rc}): see {name}.log"))
            break
        if after:
            log(f"{name}: the child stopped ({rc}) on {after[0]}; it goes on without it")
            summary.append((name, after[0], f"child process died ({rc}): see {name}.log"))
            after = after[1:]
        left = after


def props():
    """EXAMPLES cases per op, checked on CUDA against the reference as the spec declares. DRAWS cases per op
    are drawn from its Hypothesis strategy (fresh random shapes, params, dtypes and values); those of its
    first SPECS specializations are kept, and the rest of the EXAMPLES are those cases again with fresh
    random values (new seeds) and more rows, so that many cases cost few compiles. Every specialization is
    built at once, then PROCS child processes share the GPU, each over its part of the ops. With
    TKGEN_GPU_RESUME=1 a later call on the same machine goes on from the cases and results on disk."""
    import concurrent.futures as cf
    import multiprocessing as mp
    import threading
    done = lambda: {json.loads(l)[0] for l in RESULTS.read_text().splitlines()} if RESULTS.exists() else set()
    if os.environ.get("TKGEN_GPU_RESUME") == "1" and CASES.exists():
        drawn = json.loads(CASES.read_text())
        log(f"  resumed: {len(done())} of {len(drawn)} ops done")
    else:
        t = time.time()
        with cf.ProcessPoolExecutor(max_workers=WORKERS, mp_context=mp.get_context("spawn")) as pool:
            drawn = dict(zip(ops(), pool.map(draw_cases, ops())))
        specs = {op: len({spec_key(op, c) for c in cs}) for op, cs in drawn.items()}
        log(f"  {sum(map(len, drawn.values()))} cases of {len(drawn)} ops drawn in {time.time() - t:.0f} s, "
            f"{sum(specs.values())} specializations: " + " ".join(f"{o}={n}" for o, n in specs.items()))
        CASES.write_text(json.dumps(drawn))
        (OUT / "props_cases.json").write_text(json.dumps(drawn))
        RESULTS.write_text("")
        precompile_cases(drawn)
    left = [op for op in drawn if op not in done()]
    shards = [left[i::PROCS] for i in range(PROCS)]
    threads = [threading.Thread(target=resilient, args=(
        f"props{i}", shard, lambda rest: [sys.executable, __file__, "--props-child", *rest], done, 300))
        for i, shard in enumerate(shards) if shard]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for line in RESULTS.read_text().splitlines():
        op, res = json.loads(line)
        log(f"props {op}: {res[:2000]}")
        summary.append(("props", op, res[:400]))


def spec_key(op, case):
    variant, statics, dtypes = C.specialization(registry.op_package(op).OP, case)
    return variant, tuple(map(str, statics)), tuple(map(str, dtypes))


def draw_cases(op):
    """The EXAMPLES cases of `op` (see `props`): the drawn ones of its first SPECS specializations, then
    those again with fresh seeds and 0 to 40 more rows where the op has a dynamic dim (every row count is
    valid: it is a runtime size), in turn."""
    import random
    import warnings
    from hypothesis.errors import NonInteractiveExampleWarning
    warnings.simplefilter("ignore", NonInteractiveExampleWarning)
    pkg = registry.op_package(op)
    strat = __import__(pkg.__name__ + ".strategies", fromlist=["cases"]).cases()
    drawn, keys = [], []
    for _ in range(DRAWS):
        case = strat.example()
        key = spec_key(op, case)
        if key not in keys and len(keys) < SPECS:
            keys.append(key)
        if key in keys:
            drawn.append(case)
    cases, rng = drawn[:EXAMPLES], random.Random()
    for i in range(EXAMPLES - len(cases)):
        base = drawn[i % len(drawn)]
        fresh = {n: r and {**r, "seed": rng.randrange(2 ** 31)} for n, r in base["inputs"].items()}
        case, dyn = {**base, "inputs": fresh}, pkg.OP.dynamic_dim
        cases.append(case if dyn is None else C.with_rows(pkg.OP, case, case["dims"][dyn] + rng.randrange(41)))
    return cases


def props_child(names):
    drawn = json.loads(CASES.read_text())
    for op in names:
        t, fails, cuda_error = time.time(), [], False
        for case in drawn[op]:
            try:
                C.run_case(op, case, DEVICE)
            except Exception as e:  # noqa: BLE001
                fails.append(f"{type(e).__name__}: {str(e)[:300]} | replay: {json.dumps(case)[:1500]}")
                cuda_error = not isinstance(e, AssertionError) and "CUDA" in str(e)
                if cuda_error:
                    break       # a CUDA error poisons this process: record the op, then die to be restarted
        res = f"{len(drawn[op]) - len(fails)}/{len(drawn[op])} cases pass ({time.time() - t:.0f} s)"
        res += f"; first failure: {fails[0]}" if fails else ""
        print(f"props {op}: {res}", flush=True)
        with open(RESULTS, "a") as f:
            f.write(json.dumps([op, res]) + "\n")
        if cuda_error:
            os._exit(1)


def anchors():
    cases = []
    for scale in ("fp32", "pow2", "ue8m0"):
        for group in (128, 32, 64, 7168):
            cases.append(("per_token_cast", {"T": 8192, "H": 7168}, {"fmt": "e4m3", "group": group, "scale": scale, "sf_layout": "row"}, {"x": "bf16"}))
        cases.append(("per_token_cast", {"T": 4001, "H": 2560}, {"fmt": "e4m3", "group": 128, "scale": scale, "sf_layout": "col"}, {"x": "fp32"}))
        cases.append(("per_token_cast", {"T": 1, "H": 576}, {"fmt": "e4m3", "group": 64, "scale": scale, "sf_layout": "row"}, {"x": "bf16"}))
        cases.append(("per_token_cast", {"T": 333, "H": 96}, {"fmt": "e4m3", "group": 32, "scale": scale, "sf_layout": "row"}, {"x": "bf16"}))
    for fmt, scale, group in (("e5m2", "ue8m0_byte", 128), ("e2m1", "ue8m0", 32), ("e5m6", "pow2", 7168)):
        cases.append(("per_token_cast", {"T": 8192, "H": 7168}, {"fmt": fmt, "group": group, "scale": scale, "sf_layout": "col"}, {"x": "bf16"}))
    cases.append(("per_token_cast", {"T": 8192, "H": 7168}, {"fmt": "e4m3", "group": 128, "scale": "e4m3", "sf_layout": "row"}, {"x": "bf16"}))
    for src, dtype in (("bf16", "e4m3"), ("fp32", "bf16"), ("fp32", "e4m3"), ("e4m3", "fp32")):
        cases.append(("elementwise_cast", {"N": (1 << 22) + 129}, {"dtype": dtype}, {"x": src}))
    cases.append(("transpose_2d", {"M": 8064, "N": 7168}, {}, {"x": "bf16"}))
    for T_, E, k in ((8192, 256, 8), (4001, 72, 6), (8001, 128, 6), (17, 512, 32), (5, 33, 33), (1, 1, 1), (999, 384, 9)):
        cases.append(("topk_gate", {"T": T_, "E": E}, {"k": k}, {}))
    by_op = {}
    for op, dims, params, dtypes in cases:
        by_op.setdefault(op, []).append(anchor_case(op, dims, params, dtypes))
    precompile_cases(by_op)
    n_ok = 0
    for op, cs in by_op.items():
        for case in cs:
            for style, specials in (("normal", ()), ("wide", (("zero_rows", 3, 0, 1), ("max", 5, 1, 2), ("subnormal", 9, 2, 3))),
                                    ("discrete", (("ties", 11, 4, 8),))):
                case = {**case, "inputs": {k: {**v, "style": style, "specials": [list(s) for s in specials]}
                                           for k, v in case["inputs"].items()}}
                try:
                    C.run_case(op, case, DEVICE)
                    n_ok += 1
                except Exception as e:  # noqa: BLE001
                    msg = f"{op} {case['dims']} {case['params']} {style}: {str(e)[:300]}"
                    log("ANCHOR FAIL " + msg)
                    summary.append(("anchor FAIL", op, msg))
    log(f"anchors: {n_ok} cases bit-exact")
    summary.append(("anchors", "all", f"{n_ok} bit-exact"))


def saturation():
    """The native casts' saturation, which amax-derived scales never reach: precomputed scales (1, tiny,
    inf) over inputs with inf, NaN, ±max and the rounding ties just beyond it, for e4m3 and e5m2."""
    S = [float("inf"), -float("inf"), float("nan"), 1e30, -1e30, 448.0, -448.0, 456.0, 464.0, 465.0, 480.0,
         -500.0, 57344.0, 61439.0, 61440.0, -70000.0, 3e38, 1e-30, 0.0, -0.0]
    n_ok, gen = 0, torch.Generator().manual_seed(11)
    for fmt in ("e4m3", "e5m2"):
        for H, g in ((7168, 128), (96, 32)):
            for dtype in (torch.bfloat16, torch.float32):
                x = torch.randn(5, H, generator=gen) * 300
                x[0, :len(S)], x[1, -len(S):] = torch.tensor(S), torch.tensor(S)
                sf = torch.ones(5, H // g)
                sf[2], sf[3], sf[4] = 1e-30, 1e-3, float("inf")
                try:
                    C.check_tensors("per_token_cast_with_precomputed_sf", {"x": x.to(dtype).to(DEVICE), "sf": sf.to(DEVICE)},
                                    {"fmt": fmt, "group": g})
                    n_ok += 1
                except Exception as e:  # noqa: BLE001
                    log(f"SATURATION FAIL {fmt} H={H} {dtype}: {type(e).__name__}: {str(e)[:300]}")
                    summary.append(("saturation FAIL", fmt, f"H={H} {dtype}"))
    log(f"saturation: {n_ok}/8 cases bit-exact")
    summary.append(("saturation", "per_token_cast_with_precomputed_sf", f"{n_ok}/8 bit-exact"))


def eager():
    """What a training loop without CUDA graphs pays: every op's host cost per eager call on a tiny input,
    and the issue's anchor workloads eager and under CUDA graphs, tkgen against TileKernels 2.1.0 in the
    same run (benchmarks/host_cost.py). Tables in eager.md, rows in eager.json."""
    import dataclasses
    import host_cost as H
    device = torch.device(DEVICE)
    log(H.HEADER)
    rows = H.measure(ops(), device, log=log)
    anchors = H.anchors(device, log=lambda m: None)
    table = H.anchor_table(anchors)
    log(table)
    (OUT / "eager.md").write_text("\n".join([H.HEADER, *map(H.table_row, rows), "", table, ""]))
    (OUT / "eager.json").write_text(json.dumps({"host": rows, "anchors": [dataclasses.asdict(r) for r in anchors]},
                                               indent=1))
    worst = max((r for r in rows if r["impl"] == "tkgen" and "eager_us" in r), key=lambda r: r["eager_us"])
    summary.append(("eager", "host cost", f"worst tkgen op {worst['op']} {worst['eager_us']:.1f} µs per call "
                                          f"({worst['ratio']:.1f} x torch.add)"))


def determinism():
    """Ops whose schedule here is persistent (sums over the rows added per block, then in block order):
    each workload run RUNS times on the same inputs, every output compared bit for bit with the first run,
    and the first run against the reference as the spec declares."""
    from tkgen.schedule import pipeline as S
    from tkgen.tools.bench import workload_inputs
    from tkgen.driver import load_catalog
    cat = load_catalog(registry.specs_dir())
    arch = cat.archs[ARCH]
    for op in ops():
        spec = cat.op(op)
        if not S.resolve(spec, arch).get("persistent"):
            continue
        pkg = registry.op_package(op)
        for wl in spec.workloads:
            sets, params = workload_inputs(pkg, wl, torch.device(DEVICE), 1)
            first = [o.clone() for o in C.check_tensors(op, sets[0], dict(params))[0]]
            same = 0
            for _ in range(RUNS):
                outs = getattr(pkg, op)(**sets[0], **params)
                outs = outs if isinstance(outs, tuple) else (outs,)
                same += all(torch.equal(_bits(a), _bits(b)) for a, b in zip(first, outs))
            msg = f"{wl['name']}: matches the reference; {same}/{RUNS} runs bit-identical to the first"
            log(f"determinism {op} {msg}")
            summary.append(("determinism", op, msg))


RUNS = 5


def _bits(t):
    """A tensor's bits as integers of its element size (NaN payloads and signed zeros included)."""
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(-1).view(ints[t.dtype.itemsize])


def tune():
    for op in ops():
        t = time.time()
        space = ["--space", os.environ["TKGEN_GPU_TUNE_SPACE"]] if os.environ.get("TKGEN_GPU_TUNE_SPACE") else []
        try:
            r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "tune", op, "--device", DEVICE, "--reps", "10", *space],
                               capture_output=True, text=True, timeout=240)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
            r = subprocess.CompletedProcess(e.cmd, 1, out, f"timed out after {e.timeout} s")
        with open(OUT / "tune.log", "a") as f:       # one file: few files come back from a GPU session
            f.write(f"== {op}\n{r.stdout}{r.stderr}\n")
        best = [l for l in r.stdout.splitlines() if l.startswith("best")]
        log(f"tune {op} ({time.time() - t:.0f} s): {best[-1] if best else r.stderr[-500:]}")
        summary.append(("tune", op, best[-1] if best else "failed"))
    import shutil
    shutil.copy(registry.specs_dir() / "archs" / "sm90.yaml", OUT / "sm90.yaml")
    subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "generate"], capture_output=True)


def bench():
    """Every op's workloads built at once in worker processes, then timed op by op in one child process
    (restarted past an op that kills it); one merged table and roofline."""
    import statistics
    from tkgen.tools.bench import Result, report, warm_caches
    from tkgen.tools.bench_cli import DEFAULT_ADAPTERS
    warm_caches(ops(), torch.device(DEVICE), AGAINST.split(","), str(DEFAULT_ADAPTERS), WORKERS, log=log)
    parts = []

    def command(left):
        parts.append(TMP / f"bench{len(parts)}")
        return [sys.executable, "-m", "tkgen.tools.cli", "bench", *left, "--device", DEVICE, "--reps", "20",
                "--against", AGAINST, "--out", str(parts[-1])]

    def runs():
        return [json.loads((p / "bench.json").read_text()) for p in parts if (p / "bench.json").exists()]

    resilient("bench", ops(), command, lambda: {r["op"] for run in runs() for r in run["results"]}, timeout=500)
    results = [Result(**r) for run in runs() for r in run["results"]]
    if results:
        copy = statistics.median(run["meta"]["copy_gbps"] for run in runs())
        name = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
        log(report(results, copy, name, OUT))


if __name__ == "__main__":
    registry.use_generated()
    if sys.argv[1:2] == ["--props-child"]:
        props_child(sys.argv[2:])
        sys.exit(0)
    if DEVICE == "cuda":
        log(f"GPU: {torch.cuda.get_device_name()} cap {torch.cuda.get_device_capability()} torch {torch.__version__}")
        log(subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem", "--format=csv"],
                           capture_output=True, text=True).stdout)
    for phase in PHASES:
        t = time.time()
        try:
            globals()[phase]()
        except Exception as e:  # noqa: BLE001
            log(f"phase {phase} crashed: {type(e).__name__}: {e}")
        log(f"== phase {phase}: {time.time() - t:.0f} s")
    log("\nSUMMARY")
    for row in summary:
        log(" | ".join(row))
