"""The installable package: a wheel built from this checkout, installed into a fresh target directory,
serves `tkgen.ops`, `tkgen list`, `show` and `fuzz` from a directory away from the checkout (which is not
importable there), and a user's own specs, named in their pyproject.toml, generate into their own
directory and run."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis",
                                ".pytest_cache", "bench-out", ".gpu", "gpu-out")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)         # a clean tree: no stale build/ from an earlier build
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    r = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    wheel, = (tmp / "dist").glob("tkgen-*.whl")
    r = subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp / "site"), str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return tmp / "site"


def _run(site, cwd, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TKGEN_") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_wheel_carries_specs_and_generated_code(installed):
    bundled = installed / "tkgen" / "_bundled"
    for path in ("specs/archs/sm90.yaml", "specs/formats/element/e4m3.yaml", "specs/quant/per_token_cast.yaml",
                 "generated/archs/sm90.py", "generated/quant/per_token_cast/kernel_cuda.py",
                 "generated/quant/per_token_cast/knobs_sm90.py",
                 "generated/quant/per_token_cast/op.py"):
        assert (bundled / path).is_file(), path
    assert (installed / "tkgen" / "codegen" / "templates" / "op.py.j2").is_file()
    assert (installed / "tkgen" / "spec" / "schema" / "op.schema.json").is_file()


def test_ops_and_commands_run_from_the_installed_wheel(installed, tmp_path):
    code = ("import torch, tkgen, tkgen.ops as ops\n"
            f"assert tkgen.__file__.startswith({str(installed)!r}), tkgen.__file__\n"
            "q, sf = ops.per_token_cast(torch.randn(4, 256, dtype=torch.bfloat16), group=128)\n"
            "print(q.dtype, tuple(q.shape), tuple(sf.shape))\n")
    r = _run(installed, tmp_path, "-c", code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "torch.float8_e4m3fn (4, 256) (4, 2)" in r.stdout
    r = _run(installed, tmp_path, "-m", "tkgen.tools.cli", "list")
    assert r.returncode == 0 and "per_token_cast" in r.stdout and "formats: " in r.stdout and "sm90" in r.stdout
    assert f"specs:     {installed / 'tkgen' / '_bundled' / 'specs'}" in r.stdout, r.stdout
    r = _run(installed, tmp_path, "-m", "tkgen.tools.cli", "show", "topk_gate")
    assert r.returncode == 0 and "kernel_cuda.py" in r.stdout, r.stderr
    r = _run(installed, tmp_path, "-m", "tkgen.tools.cli", "fuzz", "topk_gate", "--examples", "3", "--seed", "1")
    assert r.returncode == 0 and "kernel and reference agree" in r.stdout, r.stdout + r.stderr


def test_a_users_own_specs_generate_into_their_package(installed, tmp_path):
    proj = tmp_path / "proj"
    specs = proj / "specs"
    bundled = installed / "tkgen" / "_bundled" / "specs"
    shutil.copytree(bundled / "formats", specs / "formats")
    shutil.copytree(bundled / "archs", specs / "archs")
    (specs / "moe").mkdir()
    shutil.copy(bundled / "moe" / "topk_gate.yaml", specs / "moe" / "my_topk.yaml")
    text = (specs / "moe" / "my_topk.yaml").read_text()
    (specs / "moe" / "my_topk.yaml").write_text(text.replace("op: topk_gate", "op: my_topk", 1))
    (proj / "pyproject.toml").write_text('[project]\nname = "proj"\n\n[tool.tkgen]\nspecs = "specs"\n'
                                         'generated = "proj_pkg/kernels"\n')
    r = _run(installed, tmp_path, "-m", "tkgen.tools.cli", "--specs", str(specs), "generate")
    assert r.returncode == 2 and "say where the code goes" in r.stderr     # never into the installed package
    r = _run(installed, proj, "-m", "tkgen.tools.cli", "generate")
    assert r.returncode == 0, r.stderr
    assert (proj / "proj_pkg" / "kernels" / "moe" / "my_topk" / "kernel_cpu.py").is_file()
    code = ("import torch, tkgen.ops as ops\n"
            "idx = ops.my_topk(torch.tensor([[0.5, 3.0, -1.0, 2.0]]), 2)\n"
            "print(idx.tolist(), ops.my_topk.__module__, sorted(dir(ops)))\n")
    r = _run(installed, proj, "-c", code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[[1, 3]] tkgen_generated.moe.my_topk.op ['my_topk']" in r.stdout
