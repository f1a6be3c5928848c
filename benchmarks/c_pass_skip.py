"""For every op, up to N drawn specializations (derandomized) lowered for the C target with and without the C
pipeline's own `tirx.RemoveNoOp`, which tkgen skips for C kernels (tkgen/runtime/tilelang_fixes.py): the C
sources compared, the lowering seconds summed.

    python benchmarks/c_pass_skip.py [--examples N] [op,op,...]
"""
import argparse
import importlib
import time

from lowering_time import specializations      # benchmarks/lowering_time.py: the same derandomized draws
from tkgen import registry
from tkgen.runtime import compile as C
from tkgen.runtime.kernels import kernel_module


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ops", nargs="?", default="")
    ap.add_argument("--examples", type=int, default=3)
    args = ap.parse_args()
    registry.use_generated()
    C._tilelang()                      # installs the fixes
    import tilelang
    from tilelang import tvm
    pipeline = importlib.import_module("tilelang.cpu.pipeline")
    skipped = pipeline.tirx            # the fix's view of tvm.tirx
    kept = skipped._target             # TileLang's own
    total, differ, n = [0.0, 0.0], [], 0
    for name in args.ops.split(",") if args.ops else sorted(registry.op_modules()):
        pkg = registry.op_package(name)
        km = kernel_module(pkg, "cpu")
        for variant, statics, dtypes in specializations(pkg, args.examples):
            prim = C.build(km, variant, statics + dtypes)
            target = tvm.target.Target(km.table.TARGET)
            sources = []
            for i, tirx in enumerate((kept, skipped)):
                pipeline.tirx = tirx
                with tvm.transform.PassContext(config=dict(km.table.PASS_CONFIGS)), target:
                    t = time.perf_counter()
                    sources.append(tilelang.lower(prim, target=target).kernel_source)
                    total[i] += time.perf_counter() - t
            pipeline.tirx = skipped
            n += 1
            if sources[0] != sources[1]:
                differ.append((name, variant, statics))
            print(name, variant, statics, "same" if sources[0] == sources[1] else "DIFFERENT", flush=True)
    print(f"{n} kernels, {len(differ)} with another C source; lowering {total[0]:.1f} s with the pass, "
          f"{total[1]:.1f} s without; differ: {differ}")


if __name__ == "__main__":
    main()
