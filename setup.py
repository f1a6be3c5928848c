"""Packaging hook: the wheel carries the specs and the generated code (metadata is in pyproject.toml).

They live at the top of the checkout (specs/, generated/); the build copies them into the package as
tkgen/_bundled/{specs,generated}, where tkgen.registry finds them when no checkout is around.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithBundle(build_py):
    def run(self):
        super().run()
        for name in ("specs", "generated"):
            dst = Path(self.build_lib) / "tkgen" / "_bundled" / name
            shutil.copytree(ROOT / name, dst, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithBundle})
