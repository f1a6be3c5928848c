"""Seconds TileLang takes to lower the C kernels of drawn specializations (derandomized, so that two trees
draw the same), with tkgen's compile fixes in place; a JSON line per specialization, the total at the end.
Run it once per tree to compare two versions of the generator (PYTHONPATH selects the tree):

    PYTHONPATH=<tree> python benchmarks/lowering_time.py [--examples N] [op,op,...] > times.jsonl

`c_kernels` is also what benchmarks/c_pass_skip.py and benchmarks/c_last_simplify.py compare kernels over.
"""
import argparse
import importlib
import json
import time

from hypothesis import HealthCheck, given, settings

from tkgen import registry
from tkgen.runtime import compile as C
from tkgen.runtime.kernels import kernel_module
from tkgen.testing import check as ck


def specializations(pkg, examples):
    strat = importlib.import_module(pkg.__name__ + ".strategies")
    cases = []

    @settings(max_examples=examples, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strat.cases())
    def draw(case):
        cases.append(case)

    draw()
    return list(dict.fromkeys(ck.specialization(pkg.OP, c) for c in cases))


def c_kernels(default_examples=3):
    """(op, variant, statics, lower) for each drawn C specialization of the ops the command line names
    (`[--examples N] [op,op,...]`, every op by default); `lower()` lowers its PrimFunc under the kernel's pass
    context and returns (C source, seconds). tkgen's compile fixes are installed first."""
    ap = argparse.ArgumentParser()
    ap.add_argument("ops", nargs="?", default="")
    ap.add_argument("--examples", type=int, default=default_examples)
    args = ap.parse_args()
    registry.use_generated()
    C._tilelang()
    import tilelang
    from tilelang import tvm
    for name in args.ops.split(",") if args.ops else sorted(registry.op_modules()):
        pkg = registry.op_package(name)
        km = kernel_module(pkg, "cpu")
        for variant, statics, dtypes in specializations(pkg, args.examples):
            prim = C.build(km, variant, statics + dtypes)

            def lower(prim=prim, km=km):
                target = tvm.target.Target(km.table.TARGET)
                with tvm.transform.PassContext(config=dict(km.table.PASS_CONFIGS)), target:
                    t = time.perf_counter()
                    src = tilelang.lower(prim, target=target).kernel_source
                    return src, time.perf_counter() - t

            yield name, variant, statics, lower


def main():
    total = 0.0
    for name, variant, statics, lower in c_kernels():
        src, dt = lower()
        total += dt
        print(json.dumps({"op": name, "variant": variant, "statics": repr(statics), "seconds": round(dt, 3),
                          "c_lines": src.count("\n")}), flush=True)
    print(json.dumps({"total_seconds": round(total, 1)}))


if __name__ == "__main__":
    main()
