"""`tkgen fuzz` on a broken kernel: it fails, prints the shrunk counterexample and a replay command."""
import shutil
import subprocess
import sys

from tkgen import registry


def test_fuzz_reports_a_shrunk_replayable_counterexample(tmp_path):
    out = tmp_path / "generated"
    shutil.copytree(registry.generated_dir(), out)
    k = out / "moe" / "topk_gate" / "kernel_cpu.py"
    # break the kernel: it now selects the k smallest scores
    src = k.read_text()
    assert "order_key(s[" in src
    k.write_text(src.replace("order_key(s[", "order_key(-s["))
    r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "fuzz", "topk_gate", "--examples", "30",
                        "--generated", str(out)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout
    assert "Shrunk counterexample" in r.stdout and "tkgen fuzz topk_gate" in r.stdout and "--replay" in r.stdout
    assert "differ" in r.stdout
