"""Hardware counters of one op's kernels, tkgen's and a competitor's, at the op's first workload (issue 29).

Run under Nsight Compute on the GPU host, one process per (op, implementation):
    PROF_OP=moe_topk_gate_backward PROF_IMPL=tkgen ncu --profile-from-start off --clock-control none \
        --section SpeedOfLight ... python3 benchmarks/ncu_profile.py
Every kernel is built and warmed up first; only the calls between torch.cuda.profiler.start() and stop()
(PROF_CALLS of them, default 1) are profiled. Written in session 18, not yet run on a GPU.
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tkgen import registry  # noqa: E402
from tkgen.driver import load_catalog  # noqa: E402
from tkgen.tools.bench import _load_adapters, workload_impls  # noqa: E402
from tkgen.tools.bench_cli import DEFAULT_ADAPTERS  # noqa: E402

op, impl = os.environ["PROF_OP"], os.environ.get("PROF_IMPL", "tkgen")
calls = int(os.environ.get("PROF_CALLS", "1"))
wl = load_catalog(registry.specs_dir()).op(op).workloads[0]
against = [] if impl == "tkgen" else [impl]
w = workload_impls(op, wl, torch.device("cuda"), against, _load_adapters(DEFAULT_ADAPTERS), copies=1)
fn = w["impls"][impl].fns
if fn is None:
    sys.exit(f"{op} {impl}: {w['impls'][impl].note}")
for _ in range(5):
    fn[0]()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for _ in range(calls):
    fn[0]()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print(f"{op} {impl} [{w['label']}] {w['nbytes']} bytes profiled", flush=True)
