"""A fix to TileLang 0.1.15 that tkgen's kernels need, installed once before the first compile.

The C backend's host wrapper (`TLCPUSourceWrapper`) passes the kernel only the runtime sizes that name a
buffer's *shape*: a kernel that declares a `T.StridedTensor` with runtime strides then fails to compile
("too few arguments"), while the cython adapter already reads those strides from the tensors, after every
shape size (`CythonKernelAdapter._process_dynamic_symbolic`). The fix lists the stride sizes after the
shape sizes, in the adapter's order (buffers in parameter order), so the wrapper's `call` takes what the
adapter passes. Kernels without runtime strides get the same wrapper as before.
"""
from __future__ import annotations

_DONE = False


def install():
    global _DONE
    if _DONE:
        return
    from tilelang import tvm
    from tilelang.jit.adapter.wrapper import TLCPUSourceWrapper

    shape_sizes = TLCPUSourceWrapper.get_dynamic_symbolic_set

    def with_strides(self, prim_func):
        sizes = list(shape_sizes(self, prim_func))
        seen = {name for name, _ in sizes}
        for param in prim_func.params:
            buffer = prim_func.buffer_map.get(param)
            for stride in buffer.strides if buffer is not None else ():
                if isinstance(stride, tvm.tirx.Var) and stride.name not in seen and stride not in prim_func.params:
                    seen.add(stride.name)
                    sizes.append((stride.name, str(stride.dtype)))
        return sizes

    TLCPUSourceWrapper.get_dynamic_symbolic_set = with_strides
    _DONE = True
