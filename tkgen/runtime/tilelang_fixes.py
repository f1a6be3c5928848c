"""Changes to TileLang 0.1.15 that tkgen's kernels need, installed once before the first compile.

A fix: the C backend's host wrapper (`TLCPUSourceWrapper`) passes the kernel only the runtime sizes that name a
buffer's *shape*: a kernel that declares a `T.StridedTensor` with runtime strides then fails to compile
("too few arguments"), while the cython adapter already reads those strides from the tensors, after every
shape size (`CythonKernelAdapter._process_dynamic_symbolic`). The fix lists the stride sizes after the
shape sizes, in the adapter's order (buffers in parameter order), so the wrapper's `call` takes what the
adapter passes. Kernels without runtime strides get the same wrapper as before.

A memo: `T.prim_func` rewrites the decorated function's Python AST on every call of a kernel factory
(`tilelang.language.eager.ast.mutate`: read the source, parse, transform, compile), about 0.7 s for a
merged factory and more than half of a C kernel's build. The rewrite depends on the function's code, the
names (not the values) of its free variables and its module's globals: the only values it evaluates are
the heads of argument annotations and of `with` items (`T.Tensor`, `T.float32`, `T.Kernel`), which name
globals. So for generated kernels the rewritten closure maker is kept per (code object, free variable
names), in the kernel module's own globals (it lives as long as the module: a regenerated package is a new
module and a new memo), and each call only binds the free variables' values.

A skip: before printing a C kernel, TileLang lowers its intrinsics and runs the arithmetic simplifier over
the whole kernel once more (`tilelang.engine.lower._prepare_device_codegen_mod`). For the C target that last
pass changes nothing that matters: the C source with and without it, compared for up to three drawn
specializations of every op (2026-12-07), was the same in most and otherwise differed in integer
arithmetic written in an equal form (`0 <= x` for `x >= 0`, `(a + b) * 128` for `a * 128 + b * 128`), yet the
pass took up to two thirds of the lowering (seconds for a transpose). C kernels skip it; CUDA kernels keep
it. Likewise the C pipeline's own `tirx.RemoveNoOp` near its end (`tilelang.cpu.pipeline`, before
`HoistIfThenElse`, which removes no-ops itself): over up to three drawn specializations of every op
(2026-12-07, `benchmarks/c_pass_skip.py`) the C source with and without it was the same in every one, and it
took an eighth of the lowering. Only the CPU pipeline's module sees the skip; the CUDA pipelines keep the pass.
So too four of the C pipeline's seven arithmetic simplifications: both `tirx.Simplify` (after
`ConfigIndexBitwidth` and after `RenormalizeSplitPattern`; `HoistIfThenElse` still simplifies inside) and the
`tilelang.Simplify` right after `LowerAccessPtr` and right after `LowerOpaqueBlock`. Over two drawn
specializations of every op (162 kernels, 2026-12-08) the C source was the same without any one of them, and
without these four together, in every kernel (lowering 36.5 s instead of 48.4 s); without the
`tilelang.Simplify` after `IfStmtBinding` as well, one kernel's source changed, so that one is kept. Over three
drawn specializations of every op (238 kernels, `benchmarks/c_pass_skip.py`) every C source was the same with
all five passes and without them, and the lowering took 65.4 s instead of 97.4 s.
"""
from __future__ import annotations

import threading

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
    _memoize_the_ast_rewrite()
    _skip_the_last_simplify_of_c_kernels()
    _skip_passes_of_the_c_pipeline()
    _DONE = True


def _is_c(device_mod) -> bool:
    targets = [f.attrs.get("target") if f.attrs is not None else None for f in device_mod.functions.values()]
    return bool(targets) and all(t is not None and t.kind.name == "c" for t in targets)


def _skip_the_last_simplify_of_c_kernels():
    import sys
    import tilelang
    lower = sys.modules["tilelang.engine.lower"]      # the module (tilelang.engine.lower is also a function)
    prepare = lower._prepare_device_codegen_mod

    def prepared(device_mod):
        if not _is_c(device_mod):
            return prepared.original(device_mod)
        device_mod = tilelang.transform.LowerIntrin()(device_mod)
        return tilelang.transform.HoistBroadcastValues()(device_mod)

    prepared.original = prepare
    lower._prepare_device_codegen_mod = prepared


_MEMO = "__tkgen_prim_func_rewrites__"     # the memo's name in a kernel module's globals


def _memoize_the_ast_rewrite():
    import ast
    import inspect
    from pathlib import Path
    from tilelang.language.eager import ast as eager_ast, builder, utils

    from .. import registry

    def memoized(func):
        nonlocals = utils.get_func_nonlocals(func)
        # generated kernels only (other TileLang code in the process keeps TileLang's own rewrite), and none
        # whose annotation heads would read a free variable's value
        if not (func.__module__ or "").startswith(registry.PACKAGE + ".") or "T" in nonlocals:
            return eager_ast.mutate(func)
        memo = func.__globals__.setdefault(_MEMO, {})
        key = (func.__code__, tuple(nonlocals))
        if key not in memo:           # mutate's own steps, keeping the closure maker instead of calling it once
            filename = inspect.getsourcefile(func) or inspect.getfile(func)
            mutator = eager_ast.DSLMutator(nonlocals, func.__globals__, str(Path(filename).absolute()))
            tree = mutator.visit(utils.get_ast(func))
            make_closure = utils.get_compiled_object(tree, "make_closure", filename, func.__globals__)
            memo[key] = (make_closure, ast.unparse(tree), mutator.extra_type_hints)
        make_closure, source, hints = memo[key]
        return eager_ast.IRGenerator(gen=make_closure(**nonlocals), source=source, extra_type_hints=dict(hints))

    builder.mutate = memoized


class _Forward:
    """`target`'s attributes, some replaced (`tirx` as the CPU pipeline's module sees it)."""

    def __init__(self, target, **replaced):
        self._target, self._replaced = target, replaced

    def __getattr__(self, name):
        return self._replaced[name] if name in self._replaced else getattr(self._target, name)


def _skipped(name):
    from tilelang import tvm
    return tvm.transform.module_pass(lambda mod, ctx: mod, opt_level=0, name=f"tkgen.Skipped{name}")


class _SimplifyAfter(_Forward):
    """`tilelang.transform` as the CPU pipeline sees it: `Simplify()` made right after one of the passes named
    in `after` is made (the pipeline makes each pass just before running it) is skipped, any other one kept."""

    def __init__(self, target, after):
        super().__init__(target)
        self._after, self._last = after, threading.local()

    def __getattr__(self, name):
        if name == "Simplify":
            follows = getattr(self._last, "name", None) in self._after
            self._last.name = name
            return (lambda *a, **k: _skipped("Simplify")) if follows else self._target.Simplify
        self._last.name = name
        return getattr(self._target, name)


SIMPLIFY_SKIPPED_AFTER = ("LowerAccessPtr", "LowerOpaqueBlock")


def _skip_passes_of_the_c_pipeline():
    import importlib
    pipeline = importlib.import_module("tilelang.cpu.pipeline")
    if isinstance(pipeline.tirx, _Forward):
        return
    pipeline.tirx = _Forward(pipeline.tirx, transform=_Forward(
        pipeline.tirx.transform, RemoveNoOp=lambda: _skipped("RemoveNoOp"), Simplify=lambda: _skipped("Simplify")))
    pipeline.tilelang = _Forward(pipeline.tilelang,
                                 transform=_SimplifyAfter(pipeline.tilelang.transform, SIMPLIFY_SKIPPED_AFTER))
