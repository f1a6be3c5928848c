"""A specs tree of the shipped formats and archs plus a few test specs, generated apart from generated/:
what tests of a small, made-up op need (generate over it takes seconds)."""
import os
import shutil
import subprocess
import sys

from tkgen import registry


def run(*args):
    """python *args in the checkout, with this tkgen first on the path and TileLang quiet."""
    path = os.pathsep.join([str(registry.REPO), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=registry.REPO,
                          env={**os.environ, "PYTHONPATH": path, "TILELANG_PRINT_ON_COMPILATION": "0"})


def generated_tree(root, specs_by_name: dict):
    """(specs, generated): root/specs with the formats, the archs and demo/<name>.yaml for each spec text,
    and root/generated written from it by `tkgen generate`."""
    specs = root / "specs"
    shutil.copytree(registry.specs_dir() / "formats", specs / "formats")
    shutil.copytree(registry.specs_dir() / "archs", specs / "archs")
    (specs / "demo").mkdir()
    for name, text in specs_by_name.items():
        (specs / "demo" / f"{name}.yaml").write_text(text)
    out = root / "generated"
    r = run("-m", "tkgen.tools.cli", "--specs", str(specs), "generate", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    return specs, out


def validate_text(tmp_path, text):
    """The SpecErrors of one spec file holding `text`, checked against the shipped specs directory."""
    from tkgen.driver import validate_files
    p = tmp_path / "op.yaml"
    p.write_text(text)
    return validate_files([p], registry.specs_dir())


def only_error(tmp_path, text):
    """The one SpecError of a spec text (see validate_text)."""
    errors = validate_text(tmp_path, text)
    assert len(errors) == 1, errors
    return errors[0]
