"""The packed formats' CUDA paths (software encoder, word packing across threads, unpacking loads) lower
for sm_90a and sm_100a, whatever the property tests happen to draw. No GPU or nvcc needed."""
import importlib

import pytest

from tkgen import registry
from tkgen.runtime.compile import lower_source

CASES = [("per_token_cast", "build_e5m6_ue8m0_col", (256, 64, "bf16")),
         ("cast_back", "build_e5m6_ue8m0_bf16", (256, 32)),
         ("cast_back", "build_e2m1_ue8m0_byte_fp32", (640, 32))]


@pytest.mark.parametrize("op, factory, args", CASES)
def test_packed_formats_lower_for_both_cuda_archs(op, factory, args):
    for arch in ("sm90", "sm100"):
        module = importlib.import_module(f"{registry.op_package(op).__name__}.kernel_{arch}")
        src = lower_source(module, getattr(module, factory), args)
        assert "__global__" in src, arch


def test_counts_take_one_atomic_per_counter_per_block():
    """The clamp counters: each block reduces its counts and adds them with one atomic per counter, made
    by as many threads as there are counters (not one atomic per element or per thread)."""
    import re
    for arch in ("sm90", "sm100"):
        module = importlib.import_module(f"{registry.op_package('swiglu_forward').__name__}.kernel_{arch}")
        src = lower_source(module, module.build_fp32_with_clamp, (256, 1.0, 0.5, "fp32"))
        sites = [m.start() for m in re.finditer(r"AtomicAdd\(", src)]
        assert len(sites) == 1, arch
        # the statement around it: `if (threadIdx.x / 3 == 0 ...) { AtomicAdd(&clamped_count[threadIdx.x % 3], ...) }`
        guard = src[:sites[0]].rstrip().splitlines()[-1]
        assert re.search(r"\(\(int\)threadIdx\.x\) / 3\) == 0", guard), guard
        assert src[sites[0]:].startswith("AtomicAdd((&(clamped_count[(((int)threadIdx.x) % 3)]))")
