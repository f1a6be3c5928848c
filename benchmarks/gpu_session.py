"""One full GPU session: property tests on CUDA, anchor and odd shapes bit for bit, tuning, benchmarks.

Run on the lent H200 as:  . .gpu/env.sh && python benchmarks/gpu_session.py
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
EXAMPLES = int(os.environ.get("TKGEN_GPU_EXAMPLES", "60"))
PHASES = os.environ.get("TKGEN_GPU_PHASES", "anchors,props,tune,bench").split(",")
# Which ops the props, tune and bench phases cover (default: every generated op), and bench's competitors.
OPS = [o for o in os.environ.get("TKGEN_GPU_OPS", "").split(",") if o]
AGAINST = os.environ.get("TKGEN_GPU_AGAINST", "torch,compile,tilekernels")
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


def precompile_cases(op, cases):
    from tkgen.runtime.compile import precompile
    pkg = registry.op_package(op)
    jobs = []
    for case in cases:
        variant, statics, dtypes = C.specialization(pkg.OP, case)
        jobs.append((f"{pkg.__name__}.kernel_sm90", f"build_{variant}", statics + dtypes, None))
    t = time.time()
    errs = precompile(jobs, workers=12)
    log(f"  precompiled {len(set((j[1], j[2]) for j in jobs))} {op} specializations in {time.time() - t:.0f} s; errors: {errs[:3]}")


def ops():
    return OPS or sorted(registry.op_modules())


def props():
    from hypothesis import HealthCheck, given, settings
    for op in ops():
        pkg = registry.op_package(op)
        strat = __import__(pkg.__name__ + ".strategies", fromlist=["cases"]).cases()
        pool = [strat.example() for _ in range(max(24, 4 * EXAMPLES))]   # warm the compile cache in parallel
        precompile_cases(op, pool)
        count = {"n": 0, "fail": None}

        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(strat)
        def prop(case):
            count["n"] += 1
            try:
                C.run_case(op, case, "cuda")
            except Exception:
                count["fail"] = case
                raise

        t = time.time()
        try:
            prop()
            res = f"{count['n']} examples pass"
        except Exception as e:  # noqa: BLE001
            res = f"FAIL after {count['n']}: {str(e)[:300]} | replay: {json.dumps(count['fail'])}"
        log(f"props {op}: {res} ({time.time() - t:.0f} s)")
        summary.append(("props", op, res))


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
    for T_, E, k in ((8192, 256, 8), (4001, 72, 6), (8001, 128, 6), (17, 512, 32), (5, 33, 33), (1, 1, 1), (999, 384, 9)):
        cases.append(("topk_gate", {"T": T_, "E": E}, {"k": k}, {}))
    by_op = {}
    for op, dims, params, dtypes in cases:
        by_op.setdefault(op, []).append(anchor_case(op, dims, params, dtypes))
    for op, cs in by_op.items():
        precompile_cases(op, cs)
    n_ok = 0
    for op, cs in by_op.items():
        for case in cs:
            for style, specials in (("normal", ()), ("wide", (("zero_rows", 3, 0, 1), ("max", 5, 1, 2), ("subnormal", 9, 2, 3))),
                                    ("discrete", (("ties", 11, 4, 8),))):
                case = {**case, "inputs": {k: {**v, "style": style, "specials": [list(s) for s in specials]}
                                           for k, v in case["inputs"].items()}}
                try:
                    C.run_case(op, case, "cuda")
                    n_ok += 1
                except Exception as e:  # noqa: BLE001
                    msg = f"{op} {case['dims']} {case['params']} {style}: {str(e)[:300]}"
                    log("ANCHOR FAIL " + msg)
                    summary.append(("anchor FAIL", op, msg))
    log(f"anchors: {n_ok} cases bit-exact")
    summary.append(("anchors", "all", f"{n_ok} bit-exact"))


def tune():
    for op in ops():
        t = time.time()
        r = subprocess.run([sys.executable, "-m", "tkgen.cli", "tune", op, "--device", "cuda", "--reps", "10"],
                           capture_output=True, text=True)
        (OUT / f"tune_{op}.log").write_text(r.stdout + r.stderr)
        best = [l for l in r.stdout.splitlines() if l.startswith("best")]
        log(f"tune {op} ({time.time() - t:.0f} s): {best[-1] if best else r.stderr[-500:]}")
        summary.append(("tune", op, best[-1] if best else "failed"))
    import shutil
    shutil.copy(registry.specs_dir() / "archs" / "sm90.yaml", OUT / "sm90.yaml")
    subprocess.run([sys.executable, "-m", "tkgen.cli", "generate"], capture_output=True)


def bench():
    with open(OUT / "bench.log", "w") as f:   # streamed, so a run cut short still shows its progress
        r = subprocess.run([sys.executable, "-m", "tkgen.cli", "bench", *ops(), "--device", "cuda", "--reps", "20",
                            "--against", AGAINST, "--out", str(OUT)], stdout=f, stderr=subprocess.STDOUT, text=True)
    text = (OUT / "bench.log").read_text()
    log(text[-6000:] if r.returncode == 0 else "bench failed:\n" + text[-3000:])


if __name__ == "__main__":
    registry.use_generated()
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
