"""For every op, up to N drawn specializations (derandomized) lowered for the C target with and without
TileLang's last whole-kernel Simplify (after LowerIntrin), which tkgen skips for C kernels
(tkgen/runtime/tilelang_fixes.py): the C sources compared, the lowering seconds summed.

    python benchmarks/c_last_simplify.py [--examples N] [op,op,...]
"""
import sys

from lowering_time import c_kernels      # benchmarks/lowering_time.py: the same derandomized draws


def main():
    total, differ = [0.0, 0.0], []
    L = None
    for name, variant, statics, lower in c_kernels():
        if L is None:                  # the fixes are installed by now
            L = sys.modules["tilelang.engine.lower"]
            skipped = L._prepare_device_codegen_mod      # the fix's
            kept = skipped.original                      # TileLang's own, which the fix wraps
        sources = []
        for i, prepare in enumerate((kept, skipped)):
            L._prepare_device_codegen_mod = prepare
            src, dt = lower()
            sources.append((src, dt))
            total[i] += dt
        L._prepare_device_codegen_mod = skipped
        same = sources[0][0] == sources[1][0]
        if not same:
            differ.append((name, variant, statics))
        verdict = "same" if same else "DIFFERENT"
        print(f"{name} {variant} {statics} {sources[0][1]:.2f}s -> {sources[1][1]:.2f}s {verdict}", flush=True)
    print("TOTAL", total, "differ", differ)


if __name__ == "__main__":
    main()
