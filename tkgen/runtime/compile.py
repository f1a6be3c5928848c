"""Compile generated kernel factories once per specialization, through TileLang's own caches."""
from __future__ import annotations

import functools
import os
import sys
import threading
import time

from .precompiled_header import with_header

_LOCK = threading.Lock()
_CACHE = {}
# the kernels this process built (from TileLang's disk cache or compiled) and the seconds the builds took
# (`tkgen fuzz --summary` reports them per op)
STATS = {"builds": 0, "build_seconds": 0.0}


def _tilelang():
    os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "0")
    import tilelang
    from .tilelang_fixes import install
    install()
    return tilelang


def storages_of(prim_func):
    """The storage dtype of each kernel parameter, in order (what torch tensors are viewed as)."""
    return tuple(str(prim_func.buffer_map[p].dtype) for p in prim_func.params if p in prim_func.buffer_map)


def scratch_of(prim_func):
    """(shape, storage dtype) of each scratch parameter, in order: the parameters after the outputs that a
    schedule adds (per-block partial sums, `scratch_<output>`), of static shapes, which the caller
    allocates per launch and the kernels overwrite before they read them."""
    out = []
    for p in prim_func.params:
        buf = prim_func.buffer_map.get(p)
        if buf is not None and str(buf.name).startswith("scratch_"):
            out.append((tuple(int(d) for d in buf.shape), str(buf.dtype)))
    return tuple(out)


# The calling convention of generated kernel factories, in one place (the kernel IR may change it):
# `build_<variant>(static dims, static params, input dtypes, *, knobs)` returns a TileLang PrimFunc. The
# knobs have no defaults: their values are a profile's knob table's (tkgen/runtime/kernels.py), overridden by
# an explicit schedule; the table also gives the compile's TARGET, PASS_CONFIGS and COMPILE_FLAGS.
# `kernels` below is a kernels.Kernels: (kernel module, knob table).

def factory(module, variant: str):
    """A variant's kernel factory in a generated kernel module: bound by its name, or in the module's
    `SHARED` table where the variants of a shared factory are the product of its params' choices."""
    name = f"build_{variant}"
    shared = getattr(module, "SHARED", {})
    return shared[name] if name in shared else getattr(module, name)


def knobs(module, variant: str):
    """The schedule knobs a variant's factory takes (keyword-only arguments)."""
    import inspect
    params = inspect.signature(factory(module, variant)).parameters.values()
    return [p.name for p in params if p.kind == p.KEYWORD_ONLY]


def build(kernels, variant: str, args: tuple, schedule=None):
    """The PrimFunc of a variant for its factory args (static dims, static params, input dtypes) and the
    knob table's knobs, overridden by `schedule`."""
    return factory(kernels.module, variant)(*args, **kernels.knobs(variant, schedule))


def compile_kernel(kernels, variant: str, args: tuple, schedule=None):
    """(compiled kernel, storage dtypes) of a variant of an op's kernels on a profile (see `build`).

    The in-process cache makes later calls free; TileLang's disk cache makes a new process cheap. The
    dynamic dim is a runtime symbol, so the row count is never part of the key.
    """
    schedule = dict(schedule or {})
    key = (kernels.table.__name__, variant, args, tuple(sorted(schedule.items())))
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    t0 = time.time()
    tilelang = _tilelang()
    table = kernels.table
    with announced(kernels, variant, args, schedule):
        prim = build(kernels, variant, args, schedule)
        with compile_lock(kernels, variant, args, schedule):
            flags = with_header(table.TARGET, table.COMPILE_FLAGS)
            kernel = tilelang.compile(prim, target=table.TARGET, pass_configs=dict(table.PASS_CONFIGS),
                                      compile_flags=flags or None)
    result = (kernel, storages_of(prim))
    with _LOCK:
        _CACHE[key] = result
        STATS["builds"] += 1
        STATS["build_seconds"] += time.time() - t0
    return result


ANNOUNCE_AFTER = 1.0      # seconds: a build from TileLang's disk cache takes milliseconds, a compile seconds


class announced:
    """Says on stderr that a first call is compiling its kernel: a line once the build has taken
    ANNOUNCE_AFTER seconds (the op, its variant and factory args, the target), and one with the seconds when
    it ends; nothing for a build served from the disk cache, nor with TKGEN_QUIET=1."""

    def __init__(self, kernels, variant, args, schedule):
        op = kernels.table.__name__.split(".")[-2]       # tkgen_generated.<family>.<op>.knobs_<arch>
        self.what = (f"{op} ({variant}, {', '.join(map(str, args))}"
                     f"{', ' + str(dict(schedule)) if schedule else ''}) for {kernels.arch}")
        self.timer = None
        self.told = self.done = False
        self.lock = threading.Lock()      # the timer's line is printed before the end's, or not at all

    def _tell(self):
        with self.lock:
            if self.done:
                return
            self.told = True
            print(f"tkgen: compiling {self.what}: a first call, cached afterwards (TKGEN_QUIET=1 silences this)",
                  file=sys.stderr, flush=True)

    def __enter__(self):
        self.t0 = time.time()
        if os.environ.get("TKGEN_QUIET", "") in ("", "0"):
            self.timer = threading.Timer(ANNOUNCE_AFTER, self._tell)
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, *exc):
        if self.timer is not None:
            self.timer.cancel()
            with self.lock:
                self.done = True
            if self.told and exc[0] is None:
                print(f"tkgen: compiled {self.what} in {time.time() - self.t0:.1f} s", file=sys.stderr, flush=True)
        return False


def compile_lock(kernels, variant: str, args: tuple, schedule=None):
    """A file lock per specialization, so that parallel processes (test workers, precompile workers)
    compile each kernel once and the others then read TileLang's disk cache (whose writes are atomic
    renames). The lock's name hashes the generated kernel module's source (which names its spec's hash),
    the variant, factory args, knob values, target and the TileLang and torch versions."""
    import hashlib
    import torch
    from filelock import FileLock
    from .cache import cache_dir
    text = "|".join(map(str, (_source_hash(kernels.module.__file__), variant, args,
                              sorted(kernels.knobs(variant, schedule).items()), kernels.table.TARGET,
                              _tilelang().__version__, torch.__version__)))
    locks = cache_dir() / "locks"
    locks.mkdir(exist_ok=True)
    return FileLock(str(locks / (hashlib.sha256(text.encode()).hexdigest()[:24] + ".lock")))


@functools.lru_cache(maxsize=None)
def _source_hash(path: str) -> str:
    import hashlib
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _lower(kernels, variant: str, args: tuple, schedule=None):
    tilelang = _tilelang()
    from tilelang import tvm
    prim = build(kernels, variant, args, schedule)
    table = kernels.table
    with tvm.transform.PassContext(config=dict(table.PASS_CONFIGS)), tvm.target.Target(table.TARGET):
        return tilelang.lower(prim, target=tvm.target.Target(table.TARGET))


def lower_source(kernels, variant: str, args: tuple, schedule=None) -> str:
    """Lower a variant's kernel (see `build`) for its profile's target and return the device source (no
    GPU needed)."""
    return _lower(kernels, variant, args, schedule).kernel_source


def shared_memory_bytes(kernels, variant: str, args: tuple, schedule=None) -> int:
    """The shared memory one block of the lowered kernel allocates (the largest over its kernels): every
    buffer of a shared scope in the device IR, the merged dynamic buffer included. No GPU needed."""
    from tilelang import tvm
    artifact = _lower(kernels, variant, args, schedule)
    most = 0
    for func in artifact.device_mod.functions.values():
        sizes = []

        def visit(node):
            if isinstance(node, tvm.tirx.AllocBuffer) and str(node.buffer.scope()).startswith("shared"):
                n = 1
                for d in node.buffer.shape:
                    n *= int(d)
                sizes.append(n * tvm.DataType(str(node.buffer.dtype)).bits // 8)
        tvm.tirx.stmt_functor.post_order_visit(func.body, visit)
        most = max(most, sum(sizes))
    return most


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
    package, arch, variant, args, schedule = job
    from .. import registry
    from .kernels import kernel_module
    registry.use_generated()
    try:
        compile_kernel(kernel_module(package, arch), variant, tuple(args), schedule)
        return None
    except Exception as e:  # noqa: BLE001  (reported to the caller, who decides)
        return f"{package} ({arch}) {variant}{tuple(args)} {schedule}: {type(e).__name__}: {e}"


def precompile(jobs, workers=8, within=None):
    """Fill TileLang's disk cache for many specializations at once, in worker processes.

    jobs: (op package name, arch, variant, factory args, schedule dict). The calling process then compiles
    the same specializations from the disk cache in milliseconds. Returns the errors, if any. With `within`
    (seconds), the jobs not started by then are dropped (a caller then compiles those on first use) and
    the first error names how many.
    """
    import concurrent.futures as cf
    import multiprocessing as mp
    jobs = list(dict.fromkeys((p, r, f, tuple(a), tuple(sorted((s or {}).items()))) for p, r, f, a, s in jobs))
    jobs = [(p, r, f, a, dict(s)) for p, r, f, a, s in jobs]
    if not jobs:
        return []
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_precompile_one, job) for job in jobs]
        _, late = cf.wait(futures, timeout=within)
        dropped = sum(f.cancel() for f in late)
        errors = [f.result() for f in futures if not f.cancelled() and f.result()]
        return ([f"{dropped} of {len(jobs)} not started within {within} s"] if dropped else []) + errors
