"""Where an op's kernels for one architecture profile are: its knob table (`knobs_<arch>.py`) and the
kernel module the table names (`kernel_cuda.py`, shared by the CUDA profiles whose kernels print the same;
`kernel_cpu.py`; or a profile's own `kernel_<arch>.py` where its schedule changes how kernels print).

Every user of generated kernels goes through `kernel_module`, so none of them builds module names."""
from __future__ import annotations

import contextlib
import importlib
import pkgutil
from types import ModuleType
from typing import Dict, NamedTuple, Tuple, Union


class Kernels(NamedTuple):
    """An op's kernel factories (`module`) and a profile's knob table for them (`table`: MODULE, TARGET,
    PASS_CONFIGS, COMPILE_FLAGS, and KNOBS, the keyword arguments of each factory)."""
    module: ModuleType
    table: ModuleType

    @property
    def arch(self) -> str:
        return self.table.__name__.rsplit(".", 1)[1][len("knobs_"):]

    def knobs(self, variant: str, schedule=None) -> dict:
        """A variant's knob values: the table's, overridden by an explicit `schedule` (`tkgen tune`). A
        schedule's pass parameters (`pass.param`) are not knobs: they made the kernels (see `substituted`)."""
        given = {k: v for k, v in dict(schedule or {}).items() if "." not in k}
        return {**self.table.KNOBS[f"build_{variant}"], **given}


_SUBSTITUTES: Dict[Tuple[str, str], Kernels] = {}


@contextlib.contextmanager
def substituted(op_package: Union[ModuleType, str], arch: str, kernels: Kernels):
    """Within it, `kernel_module(op_package, arch)` is `kernels`: `tkgen tune` times kernels generated for
    a candidate's pass parameters without writing them into the package."""
    key = (_name(op_package), arch)
    before = _SUBSTITUTES.get(key)
    _SUBSTITUTES[key] = kernels
    try:
        yield kernels
    finally:
        if before is None:
            del _SUBSTITUTES[key]
        else:
            _SUBSTITUTES[key] = before


def _name(op_package) -> str:
    return op_package if isinstance(op_package, str) else op_package.__name__


def kernel_module(op_package: Union[ModuleType, str], arch: str) -> Kernels:
    """The kernels of an op (its generated package, or the package's name) on a profile."""
    name = _name(op_package)
    if (name, arch) in _SUBSTITUTES:
        return _SUBSTITUTES[(name, arch)]
    table = importlib.import_module(f"{name}.knobs_{arch}")
    return Kernels(importlib.import_module(f"{name}.{table.MODULE}"), table)


def profiles() -> Dict[str, dict]:
    """{profile name: {"backend", "capability"}} of every profile kernels were generated for: one module
    each in the generated package `archs` (a new profile adds its module and changes no other)."""
    from .. import registry
    package = importlib.import_module(f"{registry.use_generated().__name__}.archs")
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
    return {n: importlib.import_module(f"{package.__name__}.{n}").ARCH for n in names}


def cuda_archs() -> Tuple[str, ...]:
    """The CUDA profiles, by name."""
    return tuple(n for n, a in profiles().items() if a["backend"] == "cuda")


def arch_for_capability(major: int, minor: int) -> str:
    """The profile for a CUDA device: the exact capability, else the same major version."""
    cuda = {n: a for n, a in profiles().items() if a["backend"] == "cuda"}
    for name, a in cuda.items():
        if tuple(a["capability"]) == (major, minor):
            return name
    for name, a in cuda.items():
        if a["capability"][0] == major:
            return name
    raise RuntimeError(f"no tkgen architecture profile for compute capability {major}.{minor}; "
                       f"add one under specs/archs/ and run `tkgen generate`")
