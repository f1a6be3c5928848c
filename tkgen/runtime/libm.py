"""The CPU's own math library, for references: the C kernels call libm's `expf`, `logf`, `log1pf`, `tanhf` and
`erff`, so a reference that calls the same functions rounds exactly as they do (libm's float32 functions are
not correctly rounded, so no other implementation agrees on every input: torch's vectorised exp differs on
~1% of inputs, a float64 exp rounded to float32 on ~0.08%).

The functions are reached through a tiny C library compiled on first use with the system's C compiler,
without fast-math (which would swap in the vector library), and cached by the hash of its source, flags and
machine under $TKGEN_CACHE (default ~/.cache/tkgen, else a temporary directory). It links the same libm.so
as TileLang's kernels, which the process resolves once, so both call the same `expf`.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from .cache import cache_dir

_SOURCE = """
#include <math.h>
void tkgen_expf(const float *x, float *y, long n) { for (long i = 0; i < n; ++i) y[i] = expf(x[i]); }
void tkgen_logf(const float *x, float *y, long n) { for (long i = 0; i < n; ++i) y[i] = logf(x[i]); }
void tkgen_log1pf(const float *x, float *y, long n) { for (long i = 0; i < n; ++i) y[i] = log1pf(x[i]); }
void tkgen_tanhf(const float *x, float *y, long n) { for (long i = 0; i < n; ++i) y[i] = tanhf(x[i]); }
void tkgen_erff(const float *x, float *y, long n) { for (long i = 0; i < n; ++i) y[i] = erff(x[i]); }
"""
_FLAGS = ["-O2", "-fno-fast-math", "-ffp-contract=off", "-shared", "-fPIC"]


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise RuntimeError("tkgen references on the CPU need a C compiler (cc, gcc or clang) to reach libm's expf")


@functools.lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    key = hashlib.sha256(" ".join([_SOURCE, *_FLAGS, platform.machine()]).encode()).hexdigest()[:16]
    cache = cache_dir()
    lib = cache / f"libm_mirror_{key}.so"
    if not lib.exists():
        # built beside its final name, so that the rename is atomic (concurrent test workers never load a
        # half-written file) and never crosses filesystems
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            src, out = Path(tmp) / "libm_mirror.c", Path(tmp) / lib.name
            src.write_text(_SOURCE)
            r = subprocess.run([_compiler(), *_FLAGS, "-o", str(out), str(src), "-lm"], capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"building tkgen's libm mirror failed:\n{r.stderr}")
            os.replace(out, lib)
    dll = ctypes.CDLL(str(lib))
    for fn in (dll.tkgen_expf, dll.tkgen_logf, dll.tkgen_log1pf, dll.tkgen_tanhf, dll.tkgen_erff):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
        fn.restype = None
    return dll


def _apply(name: str, x: torch.Tensor) -> torch.Tensor:
    if x.device.type != "cpu":
        raise ValueError(f"libm mirror: a CPU tensor, not {x.device}")
    x = x.to(torch.float32).contiguous()
    y = torch.empty_like(x)
    if x.numel():
        getattr(_library(), name)(x.data_ptr(), y.data_ptr(), x.numel())
    return y


def expf(x: torch.Tensor) -> torch.Tensor:
    """libm's expf of each element of a CPU tensor, as float32."""
    return _apply("tkgen_expf", x)


def logf(x: torch.Tensor) -> torch.Tensor:
    """libm's logf of each element of a CPU tensor, as float32."""
    return _apply("tkgen_logf", x)


def log1pf(x: torch.Tensor) -> torch.Tensor:
    """libm's log1pf of each element of a CPU tensor, as float32."""
    return _apply("tkgen_log1pf", x)


def tanhf(x: torch.Tensor) -> torch.Tensor:
    """libm's tanhf of each element of a CPU tensor, as float32."""
    return _apply("tkgen_tanhf", x)


def erff(x: torch.Tensor) -> torch.Tensor:
    """libm's erff of each element of a CPU tensor, as float32."""
    return _apply("tkgen_erff", x)
