"""Compile generated kernel factories once per specialization, through TileLang's own caches."""
from __future__ import annotations

import os
import threading

_LOCK = threading.Lock()
_CACHE = {}


def _tilelang():
    os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "0")
    import tilelang
    return tilelang


def storages_of(prim_func):
    """The storage dtype of each kernel parameter, in order (what torch tensors are viewed as)."""
    return tuple(str(prim_func.buffer_map[p].dtype) for p in prim_func.params if p in prim_func.buffer_map)


def compile_kernel(module, factory, args, schedule=None):
    """(compiled kernel, storage dtypes) for `factory(*args, **schedule)` of a generated kernel module.

    The in-process cache makes later calls free; TileLang's disk cache makes a new process cheap. The
    dynamic dim is a runtime symbol, so the row count is never part of the key.
    """
    schedule = dict(schedule or {})
    key = (module.__name__, factory.__name__, args, tuple(sorted(schedule.items())))
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    tilelang = _tilelang()
    prim = factory(*args, **schedule)
    kernel = tilelang.compile(prim, target=module.TARGET, pass_configs=dict(module.PASS_CONFIGS),
                              compile_flags=list(module.COMPILE_FLAGS) or None)
    result = (kernel, storages_of(prim))
    with _LOCK:
        _CACHE[key] = result
    return result


def lower_source(module, factory, args, schedule=None) -> str:
    """Lower `factory(*args)` for its module's target and return the device source (no GPU needed)."""
    tilelang = _tilelang()
    from tilelang import tvm
    prim = factory(*args, **dict(schedule or {}))
    with tvm.transform.PassContext(config=dict(module.PASS_CONFIGS)), tvm.target.Target(module.TARGET):
        artifact = tilelang.lower(prim, target=tvm.target.Target(module.TARGET))
    return artifact.kernel_source


def nvcc_cubin(src: str, sm: str, flags=()):
    """Build lowered CUDA source into a cubin for `sm` (sm_90a, sm_100a) with nvcc and ptxas' resource
    report (-Xptxas -v, on stderr). No GPU needed. Returns the completed process."""
    import subprocess
    import tempfile
    from pathlib import Path
    tl = _tilelang().__path__[0]
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "k.cu"
        cu.write_text(src)
        return subprocess.run(["nvcc", "--cubin", "-O3", f"-gencode=arch=compute_{sm[3:]},code={sm}", "-std=c++20",
                               "-Xptxas", "-v", *flags, f"-I{tl}/src", f"-I{tl}/3rdparty/cutlass/include",
                               "-o", str(Path(tmp) / "k.cubin"), str(cu)], capture_output=True, text=True)


def _precompile_one(job):
    module_name, factory_name, args, schedule = job
    import importlib
    from .. import registry
    registry.use_generated()
    module = importlib.import_module(module_name)
    try:
        compile_kernel(module, getattr(module, factory_name), tuple(args), schedule)
        return None
    except Exception as e:  # noqa: BLE001  (reported to the caller, who decides)
        return f"{factory_name}{tuple(args)} {schedule}: {type(e).__name__}: {e}"


def precompile(jobs, workers=8):
    """Fill TileLang's disk cache for many specializations at once, in worker processes.

    jobs: (kernel module name, factory name, args, schedule dict). The calling process then compiles the
    same specializations from the disk cache in milliseconds. Returns the errors, if any.
    """
    import concurrent.futures as cf
    import multiprocessing as mp
    jobs = list(dict.fromkeys((m, f, tuple(a), tuple(sorted((s or {}).items()))) for m, f, a, s in jobs))
    jobs = [(m, f, a, dict(s)) for m, f, a, s in jobs]
    if not jobs:
        return []
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        return [e for e in pool.map(_precompile_one, jobs) if e]
