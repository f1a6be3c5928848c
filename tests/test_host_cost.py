"""benchmarks/host_cost.py and the GPU session's `eager` phase, as a CPU dry run: they run and report both
times (no timing is asserted here; the bound is the script's own `--bound`)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_host_cost_script_reports_the_ratio_to_torch_add(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_cost.py"), "--reps", "3", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "host_cost.json").read_text())
    mine = {x["op"]: x for x in rows if x["impl"] == "tkgen"}
    assert set(mine) == {"per_token_cast", "topk_gate"}
    assert mine["per_token_cast"]["workload"] == "T=1,H=128" and mine["topk_gate"]["workload"] == "T=1,E=8"
    assert all(x["ratio"] == x["eager_us"] / x["add_us"] for x in mine.values())
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_cost.py"), "--reps", "3", "--bound", "0.5"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "above the bound of 0.5" in r.stderr        # no call is cheaper than an add


def test_gpu_session_eager_phase_dry_run(tmp_path):
    env = {**os.environ, "TKGEN_GPU_DEVICE": "cpu", "TKGEN_GPU_PHASES": "eager", "OUT": str(tmp_path),
           "TKGEN_GPU_OPS": "topk_gate", "TKGEN_GPU_TMP": str(tmp_path / "tmp")}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_session.py")], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "phase eager crashed" not in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((tmp_path / "eager.json").read_text())
    assert [x["impl"] for x in data["host"]] == ["tkgen", "tilekernels"]
    anchors = {(a["op"], a["impl"]) for a in data["anchors"]}
    assert ("cast_back", "tkgen") in anchors and ("swiglu_forward_and_per_token_cast", "tilekernels") in anchors
    tkgen_rows = [a for a in data["anchors"] if a["impl"] == "tkgen"]
    assert len(tkgen_rows) == 4 and all(a["eager_us"] and a["time_us"] for a in tkgen_rows)
    md = (tmp_path / "eager.md").read_text()
    assert "| call | tkgen eager | TileKernels eager | tkgen, CUDA graph | TileKernels, CUDA graph |" in md
