"""Launch a compiled TileLang kernel without its adapter's per-call work.

TileLang's adapters re-validate every buffer on each call, and the cython adapter (the CPU's C backend)
also prints each dynamic size's TVM variable to a string per launch (the script printer: tens of µs). A
tkgen call has checked its arguments already, so `launcher(kernel)` reads once what the adapter knows and
returns `launch(buffers, device)`, which hands the buffers (torch tensors in the kernel's parameter order,
viewed as its storage dtypes) straight to the compiled code:

- cython adapter: the library's `call(pointers and scalars..., dynamic sizes..., stream)` through ctypes,
  the sizes read from the buffers where the adapter's map says (scalar parameters, a spec's `runtime`
  params, come after the buffers and are passed as they are);
- tvm_ffi adapter (TileLang's default on CUDA): its TVM executable, which reads shapes and the stream
  itself;
- any other adapter: the kernel's own call.
"""
from __future__ import annotations

import ctypes

import torch


class Launch:
    """`launch(buffers)`: one compiled kernel on one device. `exact_dtypes`: whether the buffers must be
    viewed as the kernel's storage dtypes (else only their element sizes must match)."""

    def __init__(self, fn, exact_dtypes: bool):
        self.fn, self.exact_dtypes = fn, exact_dtypes

    def __call__(self, buffers):
        self.fn(buffers)


def launcher(kernel, device: torch.device) -> Launch:
    """The launch of a compiled kernel (a tilelang JITKernel) whose parameters are all buffers, passed in
    the parameter order, on `device`."""
    adapter = kernel.adapter
    kind = type(adapter).__name__
    if kind == "CythonKernelAdapter" and not adapter.result_idx and _scalars_last(adapter) is not None:
        return Launch(_cython_call(adapter, device), exact_dtypes=False)
    if kind == "TVMFFIKernelAdapter" and not adapter.result_idx:
        executable = adapter._get_executable()
        return Launch(lambda buffers: executable(*buffers), exact_dtypes=True)
    return Launch(lambda buffers: kernel(*buffers), exact_dtypes=True)


_SCALAR_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float}


def _scalars_last(adapter):
    """The ctypes of the kernel's scalar parameters when they all follow its buffers (as generated kernels
    declare them), else None (the kernel's own call serves)."""
    func = adapter.prim_func
    kinds = [p in func.buffer_map for p in func.params]
    n = kinds.count(True)
    if not all(kinds[:n]):
        return None
    scalars = [_SCALAR_CTYPES.get(str(p.dtype)) for p in func.params[n:]]
    return None if None in scalars else scalars


def _cython_call(adapter, device):
    """The library's `call(pointers..., scalars..., dynamic sizes..., stream)`, typed once so that ctypes
    converts plain ints; each size read from a buffer's shape (0) or stride (1) as the adapter's map says."""
    sizes = tuple(adapter.dynamic_symbolic_map.values())     # (shape or stride, buffer, dim, stride scale)
    scalars = _scalars_last(adapter)
    n = len(adapter.prim_func.params) - len(scalars)
    call = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * n, *scalars, *[ctypes.c_int64] * len(sizes),
                            ctypes.c_void_p)(("call", adapter.lib))
    error = adapter.lib.get_last_error
    if device.type == "cuda":
        index, current = device.index, torch._C._cuda_getCurrentRawStream
        stream = lambda: current(index)  # noqa: E731
    else:
        stream = lambda: 0  # noqa: E731

    def launch(buffers):
        args = [b.data_ptr() for b in buffers[:n]] + buffers[n:] if scalars else [b.data_ptr() for b in buffers]
        for ref, buf, dim, scale in sizes:
            args.append(buffers[buf].shape[dim] if ref == 0 else buffers[buf].stride(dim) * scale)
        args.append(stream())
        if call(*args):
            raise RuntimeError(f"Kernel call failed: {error().decode('utf-8')}")
    return launch
