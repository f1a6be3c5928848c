import json
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "tkgen.tools.cli", *args], capture_output=True, text=True)


def test_list_and_show():
    r = run("list")
    assert r.returncode == 0 and "per_token_cast" in r.stdout and "topk_gate" in r.stdout
    r = run("show", "per_token_cast")
    assert r.returncode == 0 and "compute:" in r.stdout and "kernel_sm90.py" in r.stdout
    r = run("show", "swiglu_backward_and_per_token_cast")     # float params, one of them optional
    assert r.returncode == 0 and "clamp: float or None, default None" in r.stdout, r.stderr


def test_fuzz_runs_and_replays():
    r = run("fuzz", "topk_gate", "--examples", "5", "--seed", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kernel and reference agree" in r.stdout
    case = {"dims": {"T": 3, "E": 8}, "params": {"k": 2}, "shapes": {"scores": [3, 8]},
            "inputs": {"scores": {"dtype": "fp32", "seed": 5, "scale_exp": 0, "style": "discrete",
                                  "specials": [["ties", 1, 2, 3]]}}}
    r = run("fuzz", "topk_gate", "--replay", json.dumps(case))
    assert r.returncode == 0 and "passes" in r.stdout


def test_fuzz_campaign_over_every_op_writes_a_summary(tmp_path):
    from conftest import op_names
    r = run("fuzz", "--all", "--examples", "1", "--seed", "3", "--summary", str(tmp_path / "fuzz.json"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((tmp_path / "fuzz.json").read_text())
    assert sorted(data["ops"]) == op_names() and data["examples"] == len(op_names())
    assert all(o["failure"] is None and o["examples"] == 1 for o in data["ops"].values())
    assert data["per_second"] > 0 and f"{len(op_names())} examples of {len(op_names())} op(s)" in r.stdout
    assert run("fuzz").returncode == 2 and run("fuzz", "topk_gate", "--all").returncode == 2
