"""The benchmark harness on the CPU: C-backend kernels against eager torch, small shapes."""
import json
import subprocess
import sys


def test_bench_cpu_small(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tkgen.cli", "bench", "topk_gate", "--device", "cpu",
                        "--against", "torch,tilekernels", "--reps", "3", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "bench.json").read_text())
    impls = {(x["workload"], x["impl"]) for x in data["results"]}
    assert any(i == "tkgen" for _, i in impls) and any(i == "torch" for _, i in impls)
    skipped = [x for x in data["results"] if x["impl"] == "tilekernels"]
    assert skipped and all(x["time_us"] is None and x["note"] for x in skipped)   # skipped with a reason
    assert data["meta"]["copy_gbps"] > 0
    assert (tmp_path / "bench.md").read_text().count("| topk_gate |") >= 4
    assert (tmp_path / "roofline.png").exists()
