"""The packed formats' CUDA paths (software encoder, word packing across threads, unpacking loads) lower
for sm_90a and sm_100a, whatever the property tests happen to draw. No GPU or nvcc needed."""
import re

import pytest

from tkgen import registry
from tkgen.runtime.compile import lower_source
from tkgen.runtime.kernels import kernel_module

CASES = [("per_token_cast", "e5m6_ue8m0_col", (256, 64, 0.0, "bf16")),
         ("cast_back", "e5m6_ue8m0_bf16", (256, 32, 1)),
         ("cast_back", "e2m1_ue8m0_byte_fp32", (640, 32, 1))]


def _kernels(op, arch):
    return kernel_module(registry.op_package(op), arch)


@pytest.mark.parametrize("op, variant, args", CASES)
def test_packed_formats_lower_for_both_cuda_archs(op, variant, args):
    for arch in ("sm90", "sm100"):
        src = lower_source(_kernels(op, arch), variant, args)
        assert "__global__" in src, arch


def test_counts_take_one_atomic_per_counter_per_block():
    """The clamp counters: each block reduces its counts and adds them with one atomic per counter, made
    by as many threads as there are counters (not one atomic per element or per thread)."""
    import re
    for arch in ("sm90", "sm100"):
        src = lower_source(_kernels("swiglu_forward", arch), "fp32_with_clamp", (256, 1.0, 0.5, "fp32"))
        sites = [m.start() for m in re.finditer(r"AtomicAdd\(", src)]
        assert len(sites) == 1, arch
        # the statement around it: `if (threadIdx.x / 3 == 0 ...) { AtomicAdd(&clamped_count[threadIdx.x % 3], ...) }`
        guard = src[:sites[0]].rstrip().splitlines()[-1]
        assert re.search(r"\(\(int\)threadIdx\.x\) / 3\) == 0", guard), guard
        assert src[sites[0]:].startswith("AtomicAdd((&(clamped_count[(((int)threadIdx.x) % 3)]))")


def test_fp8_codes_are_stored_16_bytes_at_a_time_through_the_saturating_conversion():
    """On sm90/sm100 the native e4m3 and e5m2 casts saturate (`satfinite`), so the kernels cast without a
    clamp; a clamp with its NaN test had made TileLang store codes byte by byte (18% slower on the H200)."""
    import re
    for arch in ("sm90", "sm100"):
        for variant in ("e4m3_fp32_row", "e5m2_fp32_row"):
            src = lower_source(_kernels("per_token_cast", arch), variant, (7168, 128, 0.0, "bf16"))
            assert "__NV_SATFINITE" in src, (arch, variant)
            assert re.search(r"\*\(fp8_e[45]_16_t\*\)\(q \+", src), (arch, variant)    # 16-byte stores
            assert not re.search(r"\bq\[[^;]*\] =", src), (arch, variant)               # no byte stores


def test_a_profile_whose_casts_may_not_saturate_clamps_first(tmp_path):
    """Without `native_casts_saturate`, a natively stored saturating format is clamped first, and a NaN is
    led around the clamp (both e4m3 and e5m2 have a NaN code)."""
    import shutil
    import yaml
    from tkgen.codegen.generate import render_modules
    from tkgen.driver import load_catalog
    specs = tmp_path / "specs"
    shutil.copytree(registry.specs_dir(), specs)
    sm90 = specs / "archs" / "sm90.yaml"
    doc = yaml.safe_load(sm90.read_text())
    doc["native_casts_saturate"] = False
    sm90.write_text(yaml.safe_dump(doc))
    files = render_modules(load_catalog(specs), ["per_token_cast"])
    text = _kernel_text(files, "sm90")
    e4m3, e5m2 = (_factory_source(text, v) for v in ("e4m3_fp32_row", "e5m2_fp32_row"))
    assert all("T.clamp(" in k and "T.isnan(" in k for k in (e4m3, e5m2))
    default = _kernel_text(render_modules(load_catalog(registry.specs_dir()), ["per_token_cast"]), "sm90")
    assert "T.clamp(" not in _factory_source(default, "e4m3_fp32_row")


def _kernel_text(files, arch):
    """The text of the kernel module that per_token_cast's knob table for `arch` names."""
    from pathlib import Path
    base = Path("quant/per_token_cast")
    module = re.search(r'^MODULE = "(\w+)"', files[base / f"knobs_{arch}.py"], re.M).group(1)
    return files[base / f"{module}.py"]


def _factory_source(text, variant):
    """The source of the factory that builds `variant`: its own, or the one it shares with other variants
    (`build_<variant> = specialize(make_..., ...)`, or a `specialized('build_', make_..., ...)` entry of the
    module's SHARED table: tkgen/codegen/merge_variants.py)."""
    import ast
    import re
    from tkgen.runtime.schedule import specialized
    shared = re.search(rf"^build_{variant} = specialize\((\w+),", text, re.M)
    name = shared.group(1) if shared else f"build_{variant}"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "specialized":
            factory = node.args[1].id
            if f"build_{variant}" in specialized("build_", print, *map(ast.literal_eval, node.args[2:])):
                name = factory
    return text.split(f"def {name}(")[1].split("\ndef ")[0]


def test_dequantized_stores_are_16_bytes_at_consecutive_thread_addresses():
    """cast_back reads e4m3 codes and writes bf16: the load is laid out for the store (8 codes per thread),
    so thread k writes bytes 16k..16k+15 of a row chunk; the load's own layout (16 codes per thread) had
    each warp store write every other 16 bytes (1.9x TileKernels on the H200). (sm100's profile has
    32-byte vectors: 16 codes per thread there.)"""
    import re
    src = lower_source(_kernels("cast_back", "sm90"), "e4m3_fp32_bf16", (7168, 128, 1))
    assert re.search(r"\*\(fp8_e4_8_t\*\)\(q \+", src)                                      # 8 codes per thread
    store = re.search(r"\*\(uint4\*\)\(y \+ (.*)\) = ", src)
    assert store and store.group(1).endswith("(((int64_t)((int)threadIdx.x)) * (int64_t)8))")


def test_gate_top_k_runs_once_per_row_tile():
    """moe_topk_gate_forward's output slots are held whole (padded to a power of two) beside the top-k over
    the experts: split across blocks, each block of slots redid the row's top-k (5.6x TileKernels on the
    H200). Unpadded, 33 slots left TileLang the mask on 33 of 64 threads, and the scores of the rest zero."""
    for arch in ("sm90",):
        kernels = _kernels("moe_topk_gate_forward", arch)
        for args in ((256, 32, 33, 1.0, 0, 1),):
            # the spec's default schedule, where the bug showed (the H200's tuned one has 32 threads)
            src = lower_source(kernels, "with_mask", args, dict(threads=64, block_t=2))
            assert "blockIdx.x) / " not in src and "blockIdx.x) % " not in src, (arch, args)   # one grid axis
            guards = [g for g in _enclosing(src, src.index("mask[")) if re.search(r"threadIdx\.x\) < \d", g)]
            assert not guards, (arch, args, guards)                   # the mask is loaded on every thread


def test_tree_sum_levels_are_constants_and_need_no_barrier_in_a_branch(capfd):
    """tree_sum's levels (moe_topk_gate_forward's weight sum) are unrolled when the kernel is built: each
    offset a constant, the levels past the extent gone. Run as a loop, the offset was a shift of the level
    index whose bounds TileLang's ThreadSync could not prove: it took a row's thread reading its own row
    for a conflict with another row's, and hoisted the barrier it wanted out of the rows' `tx < 2` branch
    with a race warning."""
    capfd.readouterr()
    src = lower_source(_kernels("moe_topk_gate_forward", "sm90"), "base", (64, 4, 5, 1.5, 0, 1),
                       dict(threads=32, block_t=2))
    err = capfd.readouterr().err
    assert "ThreadSync" not in err, err
    assert "(30 - l_j)" not in src and "l_j" not in src          # two constant levels for 4 slots: 2, then 1


def test_folds_read_small_state_from_a_copy_not_a_staged_product():
    """The gate backward's du[e] = sum over slots j of where(ids[j] == e, per_slot[j], 0) and the mapping's
    pairwise rank fold read per_slot [t, j] (and the other ids) from a small shared copy at the loop's
    index: staged whole, the [t, e, j] and [chunk, chunk] tiles took 8 KB per row (3.7x TileKernels on the
    H200) and 1 MB per block (over the H200's 227 KB)."""
    for op, tile in (("moe_topk_gate_backward", "(B_t, B_e, B_j)"), ("mapping_positions", "(B_b, B_r, B_j)")):
        src = open(_kernels(op, "sm90").module.__file__).read()
        assert f"T.alloc_shared({tile}" not in src and f"T.alloc_fragment({tile}" not in src, op


def _enclosing(src, pos):
    """The lines that open the blocks enclosing position `pos` of a C source (`... {` lines)."""
    stack = []
    for line in src[:pos].splitlines():
        for ch in line:
            if ch == "{":
                stack.append(line)
            elif ch == "}":
                stack.pop()
    return stack
