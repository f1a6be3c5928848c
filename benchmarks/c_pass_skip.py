"""For every op, up to N drawn specializations (derandomized) lowered for the C target with and without the
passes of the C pipeline that tkgen skips for C kernels (tkgen/runtime/tilelang_fixes.py: `tirx.RemoveNoOp`,
both `tirx.Simplify` and the `tilelang.Simplify` after `LowerAccessPtr` and after `LowerOpaqueBlock`): the C
sources compared, the lowering seconds summed.

    python benchmarks/c_pass_skip.py [--examples N] [op,op,...]
"""
import importlib

from lowering_time import c_kernels      # benchmarks/lowering_time.py: the same derandomized draws


def main():
    total, differ, n = [0.0, 0.0], [], 0
    pipeline = None
    for name, variant, statics, lower in c_kernels():
        if pipeline is None:           # the fixes are installed by now
            pipeline = importlib.import_module("tilelang.cpu.pipeline")
            skipped = pipeline.tirx, pipeline.tilelang      # the fixes' views of tvm.tirx and tilelang
            kept = skipped[0]._target, skipped[1]._target    # TileLang's own
        sources = []
        for i, (tirx, tilelang) in enumerate((kept, skipped)):
            pipeline.tirx, pipeline.tilelang = tirx, tilelang
            src, dt = lower()
            sources.append(src)
            total[i] += dt
        pipeline.tirx, pipeline.tilelang = skipped
        n += 1
        if sources[0] != sources[1]:
            differ.append((name, variant, statics))
        print(name, variant, statics, "same" if sources[0] == sources[1] else "DIFFERENT", flush=True)
    print(f"{n} kernels, {len(differ)} with another C source; lowering {total[0]:.1f} s with the passes, "
          f"{total[1]:.1f} s without; differ: {differ}")


if __name__ == "__main__":
    main()
