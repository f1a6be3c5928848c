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
