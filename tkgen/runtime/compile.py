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


def compile_kernel(module, factory, args):
    """(compiled kernel, storage dtypes) for `factory(*args)` of a generated kernel module.

    The in-process cache makes later calls free; TileLang's disk cache makes a new process cheap. The
    dynamic dim is a runtime symbol, so the row count is never part of the key.
    """
    key = (module.__name__, factory.__name__, args)
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    tilelang = _tilelang()
    prim = factory(*args)
    kernel = tilelang.compile(prim, target=module.TARGET, pass_configs=dict(module.PASS_CONFIGS),
                              compile_flags=list(module.COMPILE_FLAGS) or None)
    result = (kernel, storages_of(prim))
    with _LOCK:
        _CACHE[key] = result
    return result


def lower_source(module, factory, args) -> str:
    """Lower `factory(*args)` for its module's target and return the device source (no GPU needed)."""
    tilelang = _tilelang()
    from tilelang import tvm
    prim = factory(*args)
    with tvm.transform.PassContext(config=dict(module.PASS_CONFIGS)), tvm.target.Target(module.TARGET):
        artifact = tilelang.lower(prim, target=tvm.target.Target(module.TARGET))
    return artifact.kernel_source
