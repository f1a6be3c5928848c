"""The benchmark harness on the CPU: C-backend kernels against eager torch, small shapes."""
import json
import re
import subprocess
import sys


def test_bench_cpu_small(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "bench", "topk_gate", "--device", "cpu",
                        "--against", "torch,tilekernels", "--reps", "3", "--jobs", "2", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "built 2 workloads" in r.stdout            # built first in worker processes
    data = json.loads((tmp_path / "bench.json").read_text())
    mine = [x for x in data["results"] if x["impl"] == "tkgen"]
    assert len(mine) == 2 and all(x["extra"]["checked"] == "matches the reference" for x in mine)
    impls = {(x["workload"], x["impl"]) for x in data["results"]}
    assert any(i == "tkgen" for _, i in impls) and any(i == "torch" for _, i in impls)
    skipped = [x for x in data["results"] if x["impl"] == "tilekernels"]
    assert skipped and all(x["time_us"] is None and x["note"] for x in skipped)   # skipped with a reason
    assert data["meta"]["copy_gbps"] > 0
    assert (tmp_path / "bench.md").read_text().count("| topk_gate |") >= 4
    assert (tmp_path / "roofline.png").exists()


def test_tune_cpu_sweeps_every_workload(tmp_path):
    import shutil
    import yaml
    from tkgen import registry
    specs = tmp_path / "specs"
    shutil.copytree(registry.specs_dir(), specs)
    cpu = specs / "archs" / "cpu.yaml"
    doc = yaml.safe_load(cpu.read_text())
    doc["tune_space"] = {"block_t": [2]}
    cpu.write_text(yaml.safe_dump(doc))
    r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "--specs", str(specs), "tune", "topk_gate",
                        "--device", "cpu", "--reps", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    scored = [l for l in r.stdout.splitlines() if "geomean (" in l]
    assert len(scored) == 2, r.stdout                      # the current schedule and block_t = 2
    assert all("deepseek-v3 router" in l and "odd" in l for l in scored)
    best = min(scored, key=lambda l: float(re.search(r": ([0-9.]+) µs geomean", l).group(1)))
    tuned = yaml.safe_load(cpu.read_text()).get("tuned", {})
    if best.lstrip().startswith("{'block_t': 2}"):
        assert tuned["topk_gate"] == {"block": {"t": 2}}
    else:
        assert "topk_gate" not in tuned and "best: current schedule" in r.stdout


def test_tune_checks_candidates_as_the_property_tests_do():
    """Candidates are checked like property cases: an output exact `given` another (rmsnorm's q given
    rstd) and strided scale layouts (ue8m0 col) pass, where a plain comparison rejected every candidate.
    A candidate that sets a pass parameter (`plan_tiles.tile_elems`) runs kernels generated for it."""
    for op, space in (("rmsnorm_forward_and_per_token_cast", '{"block_t": [2], "plan_tiles.tile_elems": [1024]}'),
                      ("swiglu_backward_and_per_token_cast", '{"block_t": [2]}')):
        r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "tune", op, "--device", "cpu", "--reps", "1",
                            "--dry-run", "--space", space], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "rejected" not in r.stdout and r.stdout.count("geomean (") == 2, r.stdout
        assert "plan_tiles" not in space or "{'block_t': 2, 'plan_tiles.tile_elems': 1024}: " in r.stdout, r.stdout


def test_a_pass_parameter_candidate_gets_kernels_generated_for_it(tmp_path):
    """`tkgen tune` sweeps pass parameters: the op's kernels are generated in memory for the candidate's
    schedule (here a smaller tile budget for plan_tiles), stand in for the package's while it is timed,
    and the parameter is written as `pass_params`, not passed to the factory as a knob."""
    from tkgen import registry
    from tkgen.runtime.kernels import kernel_module, substituted
    from tkgen.tools.bench_cli import _as_schedule, candidate_kernels
    from conftest import shipped_catalog
    cat = shipped_catalog()
    pkg = registry.op_package("expand_to_mhc")
    cand = {"plan_tiles.tile_elems": 1024, "block_t": 2}
    kernels = candidate_kernels(cat, cat.op("expand_to_mhc"), pkg, "cpu", cand, tmp_path)
    shipped = kernel_module(pkg, "cpu")
    variant = next(iter(shipped.table.KNOBS))[len("build_"):]
    assert shipped.table.KNOBS[f"build_{variant}"]["tile_elems"] != 1024
    assert kernels.table.KNOBS[f"build_{variant}"]["tile_elems"] == 1024 and kernels.arch == "cpu"
    assert kernels.knobs(variant, cand) == {**kernels.table.KNOBS[f"build_{variant}"], "block_t": 2}
    with substituted(pkg, "cpu", kernels):
        assert kernel_module(pkg, "cpu") is kernels
    assert kernel_module(pkg, "cpu").table is shipped.table
    assert _as_schedule(cand) == {"block": {"t": 2}, "pass_params": {"plan_tiles": {"tile_elems": 1024}}}
