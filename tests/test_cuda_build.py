"""Where nvcc is installed, the lowered CUDA source of each op builds to a cubin for sm_90a and sm_100a."""
import shutil

import pytest

from tkgen import registry
from tkgen.runtime.compile import lower_source, nvcc_cubin
from tkgen.runtime.kernels import kernel_module

CASES = [("per_token_cast", "e4m3_ue8m0_row", (7168, 128, 0.0, "bf16")), ("topk_gate", "base", (256, 8)),
         ("per_channel_cast", "e4m3_ue8m0_true", (7168, 32, 0.0, "bf16")), # row blocks, staged transposed store
         ("batched_transpose", "base", (8, 7168, "e4m3")),                   # copied elements
         ("per_token_cast", "e5m6_ue8m0_col", (7168, 128, 0.0, "bf16")),    # packed 12-bit codes, col scales
         ("per_token_cast", "e2m1_ue8m0_byte_row", (7168, 32, 0.0, "bf16")),
         ("cast_back", "e5m6_ue8m0_bf16", (7168, 128, 1)),                   # unpacking loads
         ("per_token_cast_and_cast_back", "e2m1_pow2_bf16", (7168, 32, 0.0, "bf16")),
         # kept rows, a load at positions, int64 counts added by one atomic per counter
         ("swiglu_forward", "bf16_with_weights_with_pos_to_token_topk_with_topk_weights_with_pos_to_expert_with_clamp",
          (4096, 2.5, 0.5, "bf16"))]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch, sm", [("sm90", "sm_90a"), ("sm100", "sm_100a")])
@pytest.mark.parametrize("op, variant, args", CASES)
def test_nvcc_builds(arch, sm, op, variant, args):
    r = nvcc_cubin(lower_source(kernel_module(registry.op_package(op), arch), variant, args), sm)
    assert r.returncode == 0, r.stderr[-2000:]
