"""Kernels compile under a file lock per specialization: a second process waits for the first and then
reads TileLang's disk cache, so parallel test workers never compile the same kernel twice at once."""
import subprocess
import sys
import time

import torch

import tkgen.ops as ops
from tkgen import registry
from tkgen.runtime.compile import compile_lock
from tkgen.runtime.kernels import kernel_module

CHILD = """
import sys, time, torch, tkgen.ops as ops
print("ready", flush=True)
t = time.perf_counter()
ops.topk_gate(torch.randn(3, 24), 5)
print(f"{time.perf_counter() - t:.2f}", flush=True)
"""


def test_a_process_waits_for_the_lock_of_the_kernel_it_compiles():
    ops.topk_gate(torch.randn(3, 24), 5)          # in TileLang's disk cache now: the child needs no compiler
    kernels = kernel_module(registry.op_package("topk_gate"), "cpu")
    lock = compile_lock(kernels, "base", (24, 5))
    with lock:
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(6)
    took = float(child.stdout.readline())
    assert child.wait(timeout=120) == 0
    assert took > 5, f"the child did not wait for the lock ({took} s)"
    assert compile_lock(kernels, "base", (24, 6)).lock_file != lock.lock_file


def test_the_prim_func_rewrite_is_kept_per_function_and_builds_the_same_kernels():
    """TileLang rewrites a `T.prim_func`'s Python AST on every call of a kernel factory; tkgen keeps the
    rewrite per function (tkgen/runtime/tilelang_fixes.py). The kernels built through the memo, for
    different static sizes and in either order, are TileLang's own, printed the same."""
    from tilelang.language.eager import ast as eager_ast, builder
    from tkgen.runtime.compile import _tilelang, build
    from tkgen.runtime.tilelang_fixes import _MEMO
    _tilelang()
    kernels = kernel_module(registry.op_package("topk_gate"), "cpu")
    sizes = [(24, 5), (40, 7), (24, 5)]
    memoized = builder.mutate
    assert memoized is not eager_ast.mutate
    with_memo = [build(kernels, "base", args).script() for args in sizes]
    assert kernels.module.__dict__[_MEMO]
    builder.mutate = eager_ast.mutate
    try:
        own = [build(kernels, "base", args).script() for args in sizes]
    finally:
        builder.mutate = memoized
    assert with_memo == own
    assert with_memo[0] != with_memo[1] and with_memo[0] == with_memo[2]


def test_the_precompiled_header_is_built_once_and_changes_no_machine_code(tmp_path, monkeypatch):
    """C kernels compile with TileLang's common header precompiled (tkgen/runtime/precompiled_header.py):
    g++ loads the `.gch` (its -Winvalid-pch says nothing), and the shared library's code is the same as
    without it."""
    import subprocess
    from tilelang.contrib.cc import get_cplus_compiler
    from tilelang.env import TILELANG_TEMPLATE_PATH
    from tkgen.runtime import precompiled_header as pch
    from tkgen.runtime.compile import _tilelang, build
    monkeypatch.setenv("TKGEN_CACHE", str(tmp_path))
    pch._header.cache_clear()
    tilelang = _tilelang()
    kernels = kernel_module(registry.op_package("topk_gate"), "cpu")
    flags = pch.with_header("c", kernels.table.COMPILE_FLAGS)
    assert flags[:-2] == list(kernels.table.COMPILE_FLAGS) and flags[-2] == "-include"
    assert (tmp_path / "pch").is_dir() and flags[-1].startswith(str(tmp_path))
    assert pch.with_header("cuda", ["-fmad=false"]) == ["-fmad=false"]
    source = tilelang.lower(build(kernels, "base", (24, 5)), target="c").kernel_source
    (tmp_path / "k.cpp").write_text(source)
    text = {}
    for name, extra in (("plain", []), ("pch", flags[-2:])):
        lib = tmp_path / f"{name}.so"
        r = subprocess.run([get_cplus_compiler(), "-std=c++17", "-fPIC", "-shared", str(tmp_path / "k.cpp"),
                            "-I" + str(TILELANG_TEMPLATE_PATH), *kernels.table.COMPILE_FLAGS, "-Winvalid-pch",
                            *extra, "-o", str(lib)], capture_output=True, text=True)
        assert r.returncode == 0 and "pch" not in r.stderr, r.stderr
        dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True).stdout
        text[name] = dump[dump.index("<kernel_kernel>:"):].split("\n\n")[0].split("\n")[1:]
        text[name] = [line.split(":", 1)[1] for line in text[name] if ":" in line]
    assert text["plain"] == text["pch"] and len(text["plain"]) > 10
    pch._header.cache_clear()


def test_c_kernels_skip_the_last_simplify_which_changes_nothing_in_them(monkeypatch):
    """TileLang's last simplification before printing a kernel is skipped for the C target
    (tkgen/runtime/tilelang_fixes.py): a C kernel's source is the same with it, and CUDA kernels still run it."""
    import sys
    from tkgen.runtime.compile import _lower, _tilelang
    from tkgen.runtime.tilelang_fixes import _is_c
    _tilelang()
    lower = sys.modules["tilelang.engine.lower"]
    prepared = lower._prepare_device_codegen_mod
    original = prepared.original
    ran = []

    def counted(mod):
        ran.append(_is_c(mod))
        return original(mod)

    monkeypatch.setattr(prepared, "original", counted)
    pkg = registry.op_package("topk_gate")
    cpu, sm90 = kernel_module(pkg, "cpu"), kernel_module(pkg, "sm90")
    skipped = _lower(cpu, "base", (40, 7)).kernel_source
    assert ran == []
    assert "__global__" in _lower(sm90, "base", (40, 7)).kernel_source and ran == [False]
    monkeypatch.setattr(lower, "_prepare_device_codegen_mod", counted)
    assert _lower(cpu, "base", (40, 7)).kernel_source == skipped and ran == [False, True]


def test_the_c_pipeline_skips_passes_which_change_nothing_in_c_kernels(monkeypatch):
    """The C pipeline's own RemoveNoOp, both tirx.Simplify and two of its five tilelang.Simplify are skipped
    (tkgen/runtime/tilelang_fixes.py): a C kernel's source is the same with them (a kernel whose guarded rows
    leave no-ops to remove), and the CUDA pipelines still run them."""
    import importlib

    import tilelang
    from tilelang import tvm
    from tkgen.runtime.compile import _lower, _tilelang
    _tilelang()
    pipeline = importlib.import_module("tilelang.cpu.pipeline")
    ran = []

    def counting(module, name):
        real = getattr(module, name)

        def made(*args, **kwargs):
            ran.append(f"{module.__name__.split('.')[0]}.{name}")
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, made)

    counting(tvm.tirx.transform, "RemoveNoOp")
    counting(tvm.tirx.transform, "Simplify")
    counting(tilelang.transform, "Simplify")
    pkg = registry.op_package("per_token_cast_requant_stochastic")
    cpu, sm90 = kernel_module(pkg, "cpu"), kernel_module(pkg, "sm90")
    args = ("e4m3_ue8m0_fp32_col", (384, 32, 32, 32, 1.0e-4))
    skipped = _lower(cpu, *args).kernel_source
    assert sorted(ran) == ["tilelang.Simplify"] * 3
    ran.clear()
    assert "__global__" in _lower(sm90, *args).kernel_source and "tvm.RemoveNoOp" in ran
    monkeypatch.setattr(pipeline, "tirx", pipeline.tirx._target)
    monkeypatch.setattr(pipeline, "tilelang", pipeline.tilelang._target)
    ran.clear()
    assert _lower(cpu, *args).kernel_source == skipped
    assert sorted(ran) == ["tilelang.Simplify"] * 5 + ["tvm.RemoveNoOp"] + ["tvm.Simplify"] * 2


def test_without_a_writable_cache_c_kernels_compile_without_the_header(tmp_path, monkeypatch):
    from tkgen.runtime import precompiled_header as pch
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache's pch folder would go")
    monkeypatch.setattr(pch, "cache_dir", lambda: blocked)
    pch._header.cache_clear()
    try:
        assert pch.with_header("c", ["-O2"]) == ["-O2"]
    finally:
        pch._header.cache_clear()
