"""Registers, spills and store widths of generated CUDA kernels, from nvcc's resource report (no GPU needed).

    python benchmarks/resource_report.py OP [OP...] [--arch sm90] [--schedule '{"threads": 256}' ...]

For each op, each workload in its spec and each schedule given (default: the profile's own), lowers the
kernel, builds a cubin with nvcc (-Xptxas -v) and prints registers per thread, spill stores/loads (bytes),
local memory per thread and how outputs are stored (vector types, or `scalar`). A kernel that spills, or stores byte by byte, is what
to look at first when the GPU says a kernel is far from the copy bandwidth.
"""
import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tkgen import registry  # noqa: E402
from tkgen.tools.bench import sized_for, workload_inputs
from tkgen.runtime.compile import lower_source, nvcc_cubin  # noqa: E402
from tkgen.runtime.kernels import kernel_module  # noqa: E402
from tkgen.runtime.ops import check, specialization  # noqa: E402

SM = {"sm90": "sm_90a", "sm100": "sm_100a"}


def build_report(src: str, sm: str, flags=()) -> dict:
    r = nvcc_cubin(src, sm, flags)
    if r.returncode:
        return {"error": r.stderr[-300:]}
    num = lambda pat: int(m.group(1)) if (m := re.search(pat, r.stderr)) else 0  # noqa: E731
    return {"regs": num(r"Used (\d+) registers"), "spill_st": num(r"(\d+) bytes spill stores"),
            "spill_ld": num(r"(\d+) bytes spill loads"), "stack": num(r"(\d+) bytes stack frame"),
            "smem": num(r"(\d+) bytes smem")}


def global_stores(src: str) -> str:
    """How the kernel writes each output (its non-const pointer parameters): the vector types of the
    global stores, and `scalar` for element-wise ones (byte stores of fp8 codes show up as `q:scalar`)."""
    sig = re.search(r"__global__ void (?:__launch_bounds__\([^)]*\) )?\w+\(([^)]*)\)", src)
    outs = [m.group(1) for p in (sig.group(1).split(",") if sig else [])
            if "const" not in p and "*" in p and (m := re.search(r"(\w+)\s*$", p))]
    each = []
    for name in outs:
        kinds = set(re.findall(rf"\*\((\w+)\*\)\({name} \+[^;]*\) =", src))
        if re.search(rf"\b{name}\[[^;]*\] =", src):
            kinds.add("scalar")
        each.append(f"{name}:{'/'.join(sorted(kinds)) or 'none'}")
    return " ".join(each)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ops", nargs="+")
    ap.add_argument("--arch", default="sm90")
    ap.add_argument("--schedule", action="append", default=[], help="JSON dict of schedule knobs")
    args = ap.parse_args()
    registry.use_generated()
    from tkgen.driver import load_catalog
    import torch
    cat, cpu = load_catalog(registry.specs_dir()), torch.device("cpu")
    for name in args.ops:
        pkg = registry.op_package(name)
        kernels = kernel_module(pkg, args.arch)
        for wl in cat.op(name).workloads:
            wl = sized_for(cpu, cat.op(name), wl)      # the row count is a runtime size: lowering ignores it
            sets, params = workload_inputs(pkg, wl, cpu, 1)
            variant, statics, dtypes = specialization(pkg.OP, sets[0], params, check(pkg.OP, sets[0], params))
            statics += dtypes
            for sched in [json.loads(s) for s in args.schedule] or [{}]:
                try:
                    src = lower_source(kernels, variant, statics, sched)
                    rep = build_report(src, SM[args.arch], kernels.table.COMPILE_FLAGS)
                    rep["stores"] = global_stores(src)
                except Exception as e:  # noqa: BLE001
                    rep = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                print(f"{name} [{wl['name']}] {variant}{statics} {sched or 'profile'}: {rep}", flush=True)


if __name__ == "__main__":
    main()
