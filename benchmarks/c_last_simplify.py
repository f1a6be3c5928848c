"""For every op, up to three drawn specializations (derandomized) lowered for the C target with and without
TileLang's last whole-kernel Simplify (after LowerIntrin), which tkgen skips for C kernels
(tkgen/runtime/tilelang_fixes.py): the C sources compared, the lowering seconds summed.

    python benchmarks/c_last_simplify.py [op,op,...]
"""
import importlib
import sys
import time
from tkgen import registry
from tkgen.runtime import compile as C
from tkgen.runtime.kernels import kernel_module
from tkgen.testing import check as ck
from hypothesis import given, settings, HealthCheck
registry.use_generated()
tl = C._tilelang()
from tilelang import tvm
import tilelang
L = sys.modules["tilelang.engine.lower"]
orig = L._prepare_device_codegen_mod.original        # TileLang's own, which the fix wraps
def skip(device_mod):
    device_mod = tilelang.transform.LowerIntrin()(device_mod)
    return tilelang.transform.HoistBroadcastValues()(device_mod)
ops = sorted(registry.op_modules()) if len(sys.argv) < 2 else sys.argv[1].split(",")
tot = [0.0, 0.0]; differ = []
for name in ops:
    pkg = registry.op_package(name)
    strat = importlib.import_module(pkg.__name__ + ".strategies")
    cases = []
    @settings(max_examples=3, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strat.cases())
    def grab(c): cases.append(c)
    try:
        grab()
    except Exception as e:
        print(name, "draw failed", e); continue
    km = kernel_module(pkg, "cpu")
    seen = set()
    for case in cases:
        spec = ck.specialization(pkg.OP, case)
        if spec in seen: continue
        seen.add(spec)
        variant, statics, dtypes = spec
        prim = C.build(km, variant, statics + dtypes)
        srcs = []
        for f in (orig, skip):
            L._prepare_device_codegen_mod = f
            with tvm.transform.PassContext(config=dict(km.table.PASS_CONFIGS)), tvm.target.Target(km.table.TARGET):
                t = time.perf_counter()
                src = tilelang.lower(prim, target=tvm.target.Target(km.table.TARGET)).kernel_source
                dt = time.perf_counter() - t
            srcs.append((src, dt))
        L._prepare_device_codegen_mod = orig
        tot[0] += srcs[0][1]; tot[1] += srcs[1][1]
        same = srcs[0][0] == srcs[1][0]
        if not same: differ.append((name, spec))
        print(f"{name} {variant} {statics} {srcs[0][1]:.2f}s -> {srcs[1][1]:.2f}s {'same' if same else 'DIFFERENT'}",
              flush=True)
print("TOTAL", tot, "differ", differ)
