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
