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
