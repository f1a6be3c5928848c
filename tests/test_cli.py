import json
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "tkgen.tools.cli", *args], capture_output=True, text=True)


def test_list_and_show():
    r = run("list")
    assert r.returncode == 0 and "per_token_cast" in r.stdout and "topk_gate" in r.stdout
    r = run("show", "per_token_cast")
    assert r.returncode == 0 and "compute:" in r.stdout and "kernel_cuda.py" in r.stdout and "knobs_sm90.py" in r.stdout
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
    """`--all` is every op. Run to the end it compiles a kernel per op (minutes), so the campaign here stands
    where one cut short would: every op but two done (their entries as a finished op's), the two left run
    by `--all --resume`, and the summary then holds every op."""
    from conftest import op_names
    left = ["normalize_weight", "topk_gate"]
    summary = tmp_path / "fuzz.json"
    r = run("fuzz", left[0], "--examples", "1", "--seed", "3", "--summary", str(summary))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads(summary.read_text())
    finished = data["ops"].pop(left[0])
    data["ops"] = {name: dict(finished) for name in op_names() if name not in left}
    summary.write_text(json.dumps(data))
    r = run("fuzz", "--all", "--examples", "1", "--summary", str(summary), "--resume")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    n = len(op_names())
    assert f"{n - 2} op(s) done, 2 to go (seed 3)" in r.stdout and f"{n} examples of {n} op(s)" in r.stdout
    data = json.loads(summary.read_text())
    assert sorted(data["ops"]) == op_names() and data["examples"] == len(op_names())
    assert all(data["ops"][name]["failure"] is None and data["ops"][name]["examples"] == 1 for name in left)
    assert all(data["ops"][name]["specializations"] == 1 for name in left) and data["per_second"] > 0
    assert run("fuzz").returncode == 2 and run("fuzz", "topk_gate", "--all").returncode == 2


def test_fuzz_campaign_resumes_from_its_summary_and_runs_ops_in_workers(tmp_path):
    summary = str(tmp_path / "campaign.json")
    r = run("fuzz", "topk_gate", "normalize_weight", "--examples", "2", "--seed", "5", "--summary", summary,
            "--jobs", "2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    first = json.loads(open(summary).read())
    assert sorted(first["ops"]) == ["normalize_weight", "topk_gate"] and first["seed"] == 5
    assert all(o["examples"] == 2 and o["specializations"] >= 1 and o["builds"] >= 0 for o in first["ops"].values())
    assert "[2/2 ops" in r.stdout                               # a line per op as its worker ends
    # resumed with one more op: the two done are kept as they were, the new one drawn with the file's seed
    r = run("fuzz", "topk_gate", "normalize_weight", "rmsnorm_forward", "--examples", "2", "--summary", summary,
            "--resume")
    assert r.returncode == 0 and "2 op(s) done, 1 to go (seed 5)" in r.stdout, r.stdout[-3000:] + r.stderr
    data = json.loads(open(summary).read())
    assert sorted(data["ops"]) == ["normalize_weight", "rmsnorm_forward", "topk_gate"] and data["examples"] == 6
    assert data["ops"]["topk_gate"] == first["ops"]["topk_gate"]
    # another campaign's file is refused in one line, and so is --resume without a summary
    r = run("fuzz", "topk_gate", "--examples", "3", "--summary", summary, "--resume")
    assert r.returncode == 2 and "examples_per_op=2, not 3" in r.stderr and "Traceback" not in r.stderr
    r = run("fuzz", "topk_gate", "--resume")
    assert r.returncode == 2 and "--summary" in r.stderr

# unknown ops, files and archs: one line on stderr with the closest names, exit code 2, no traceback
# (in-process through tkgen.tools.cli.main; --debug raises instead)
def _main(capsys, *args):
    from tkgen.tools.cli import main
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line(err, *words):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), err


def test_show_unknown_op(capsys):
    rc, _, err = _main(capsys, "show", "per_token_cst")
    assert rc == 2
    _one_line(err, "tkgen show: unknown op 'per_token_cst'", "did you mean per_token_cast")


def test_fuzz_unknown_op(capsys):
    rc, _, err = _main(capsys, "fuzz", "per_tokn_cast", "--examples", "1")
    assert rc == 2
    _one_line(err, "unknown op 'per_tokn_cast'", "did you mean per_token_cast")


def test_validate_missing_file(capsys, tmp_path):
    rc, _, err = _main(capsys, "validate", str(tmp_path / "nonexistent.yaml"))
    assert rc == 2
    _one_line(err, "tkgen validate: no such spec file or directory", "nonexistent.yaml")
    rc, _, err = _main(capsys, "validate", "per_token_cast.yaml")        # a spec's name, not its path
    assert rc == 2
    _one_line(err, "did you mean", "specs/quant/per_token_cast.yaml")


def test_generate_missing_specs_directory(capsys, tmp_path):
    from tkgen import registry
    rc, _, err = _main(capsys, "--specs", str(registry.specs_dir()) + "z", "generate", "--out", str(tmp_path))
    assert rc == 2
    _one_line(err, "tkgen generate: no such specs directory", f"did you mean {registry.specs_dir()}?")
    assert not any(tmp_path.iterdir())


def test_bench_unknown_op_and_adapters(capsys, tmp_path):
    rc, _, err = _main(capsys, "bench", "topk_gat", "--device", "cpu", "--out", str(tmp_path))
    assert rc == 2
    _one_line(err, "tkgen bench: unknown op 'topk_gat'", "did you mean topk_gate")
    rc, _, err = _main(capsys, "bench", "topk_gate", "--device", "cpu", "--adapters", str(tmp_path / "nope.py"),
                       "--out", str(tmp_path))
    assert rc == 2
    _one_line(err, "no such adapters file")


def test_tune_unknown_op_and_arch(capsys):
    rc, _, err = _main(capsys, "tune", "topk_gat", "--device", "cpu", "--dry-run")
    assert rc == 2
    _one_line(err, "tkgen tune: unknown op 'topk_gat'", "did you mean topk_gate")
    rc, _, err = _main(capsys, "tune", "topk_gate", "--device", "cpu", "--arch", "sm9", "--dry-run")
    assert rc == 2
    _one_line(err, "unknown arch 'sm9'", "did you mean sm90")


def test_debug_keeps_the_traceback(capsys):
    import pytest
    from tkgen.tools.cli import UsageError, main
    with pytest.raises(UsageError, match="unknown op"):
        main(["--debug", "show", "per_token_cst"])


def test_progress_of_long_commands():
    """validate and generate report progress on stderr: a counter rewritten in place on a terminal, else
    a line every `every` seconds (none for a short run)."""
    import io
    from tkgen.tools.cli import progress_printer

    class Tty(io.StringIO):
        def isatty(self):
            return True

    log = io.StringIO()
    step = progress_printer("validated", 3, every=0.0, stream=log)
    for i in range(1, 4):
        step(i, f"spec{i}.yaml")
    assert log.getvalue().splitlines() == ["tkgen: validated 1/3 (0 s)", "tkgen: validated 2/3 (0 s)"]
    quiet = io.StringIO()
    step = progress_printer("validated", 3, stream=quiet)         # every 10 s: nothing in a short run
    for i in range(1, 4):
        step(i, "x")
    assert quiet.getvalue() == ""
    tty = Tty()
    step = progress_printer("rendered", 2, stream=tty)
    step(1, "per_token_cast")
    step(2, "topk_gate")
    assert "\rrendered 1/2 per_token_cast" in tty.getvalue() and "\n" not in tty.getvalue()
    assert tty.getvalue().endswith("\r")                               # cleared: the summary follows


def test_validate_and_generate_call_the_progress(capsys, monkeypatch, tmp_path):
    """The commands pass a step per spec (per file validated, per op rendered); generate runs over a tree of
    two ops (test_generated checks the shipped tree)."""
    import shutil
    import tkgen.tools.cli as cli
    from tkgen import registry
    seen = []
    monkeypatch.setattr(cli, "progress_printer", lambda verb, total, **k: lambda i, name: seen.append((verb, i, total)))
    path = str(registry.specs_dir() / "moe" / "topk_gate.yaml")
    assert cli.main(["validate", path]) == 0
    assert seen == [("validated", 1, 1)]
    seen.clear()
    specs = tmp_path / "specs"
    for part in ("formats", "archs"):
        shutil.copytree(registry.specs_dir() / part, specs / part)
    for op in ("moe/topk_gate", "quant/cast_back"):
        (specs / op).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(registry.specs_dir() / f"{op}.yaml", specs / f"{op}.yaml")
    assert cli.main(["--specs", str(specs), "generate", "--out", str(tmp_path / "generated")]) == 0
    assert seen == [("rendered", 1, 2), ("rendered", 2, 2)]
    capsys.readouterr()


def test_lower_writes_the_cuda_source_of_a_case_without_a_gpu(capsys, tmp_path):
    """`tkgen lower OP --arch sm90`: the simplest drawn case (or --case) lowered to CUDA source."""
    out = tmp_path / "topk_gate.cu"
    rc, stdout, _ = _main(capsys, "lower", "topk_gate", "--arch", "sm100", "--out", str(out))
    assert rc == 0 and "lines of sm100 source" in stdout
    text = out.read_text()
    assert text.startswith("// tkgen lower topk_gate --arch sm100 --case '{") and "__global__" in text
    case = text.splitlines()[0].split("--case '", 1)[1].rstrip("'")
    rc, stdout, _ = _main(capsys, "lower", "topk_gate", "--case", case)      # sm90, printed
    assert rc == 0 and "__global__" in stdout


def test_lower_unknown_op_and_arch(capsys):
    rc, _, err = _main(capsys, "lower", "topk_gat")
    assert rc == 2
    _one_line(err, "tkgen lower: unknown op 'topk_gat'", "did you mean topk_gate")
    rc, _, err = _main(capsys, "lower", "topk_gate", "--arch", "sm91")
    assert rc == 2
    _one_line(err, "unknown CUDA arch 'sm91'", "did you mean sm90")


def test_show_passes_prints_the_ir_after_each_pass():
    r = run("show", "swiglu_forward", "--passes", "--arch", "cpu", "--variant", "fp32")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "swiglu_forward, variant fp32, profile cpu" in out
    heads = [line for line in out.splitlines() if line.startswith("== ")]
    assert heads[0] == "== naive" and heads[1] == "== plan_tiles"
    # no streamed axis here: the pass runs with its parameters and rewrites nothing the text form shows
    assert "== stream kind='serial' (unchanged)" in heads
    assert "== fuse" in heads and "parallel (t, h):" in out and "store out[" in out
    r = run("show", "swiglu_forward", "--passes", "--arch", "nope")
    assert r.returncode != 0 and "unknown arch 'nope'" in r.stderr
