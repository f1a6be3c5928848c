"""The mapping kernels' CUDA lowerings (sm_90a and sm_100a) for the params that failed on the H200, and
the structure that makes them right there. No GPU needed: the checks read the lowered source and IR."""
import re

import pytest

from tkgen import registry
from tkgen.runtime.compile import lower_source, shared_memory_bytes
from tkgen.runtime.kernels import kernel_module

from conftest import shipped_catalog

ARCHS = ("sm90", "sm100")
H200_SHARED_BYTES = 227 * 1024          # the most shared memory one block may have on sm90


def _kernel(op, arch):
    return kernel_module(registry.op_package(op), arch)


# (op, factory args): the first two gave wrong results on the H200 (mapping_chunk_offsets with E = 1 and
# 512 chunks per group, mapping_segments with 256 experts in get_fused_mapping), the third did not lower
PREFIX_CASES = [("mapping_chunk_offsets", (1, 512)), ("mapping_chunk_offsets", (256, 256)),
                ("mapping_segments", (256, 16)), ("mapping_segments", (3, 32))]


@pytest.mark.parametrize("op, args", PREFIX_CASES)
def test_prefix_slices_are_written_to_shared_memory_by_their_owner(op, args):
    """A prefix writes one slice of its result per step of its loop. Into a fragment, TileLang 0.1.15 took
    the writing threads from the fragment's layout and guarded the write with `threadIdx.x <= owner`
    (`thread < owner + 1`), so every thread up to the owner overwrote its own elements with the running
    sum: all offsets of a 128-chunk stretch came out equal. The slices now go to shared memory, and the
    loops that read them wait for the scan (`__syncthreads`)."""
    for arch in ARCHS:
        module = _kernel(op, arch)
        src = lower_source(module, "base", args)
        scan = re.search(r"for \(int (r_\w+) = 0;", src)
        assert scan, arch
        step = scan.group(1)
        assert not re.search(rf"threadIdx\.x\) <=? \(?[^;{{]*\b{step}\b", src), arch
        result = {"mapping_chunk_offsets": "offsets_tile", "mapping_segments": "start"}[op]
        assert re.search(rf"__shared__[^;]* {result}\[\]", src) or \
            re.search(rf"\b{result} = \(\(void\*\)\(\(char\*\)buf_dyn_shmem", src), arch
        assert re.search(rf"\b{result}\[[^\]]*\b{step}\b[^\]]*\] = ", src), arch
        assert "__syncthreads()" in src[scan.start():], arch


def test_positions_rank_within_the_shared_memory_of_a_block():
    """mapping_positions ranks each pair among the earlier pairs of its chunk: a fold over the chunk that
    reads the other pairs' experts from a [chunk] copy, not a staged [chunk, chunk] tile (1 MB for a chunk
    of 512, which the H200 refused to launch). For every chunk the spec allows, with the most experts."""
    spec = shipped_catalog().op("mapping_positions")
    chunks = spec.params["chunk"].choices
    experts = spec.dims["E"].max
    for arch in ARCHS:
        module = _kernel("mapping_positions", arch)
        # the shared memory grows with the chunk: every chunk on sm90, the largest on sm100 (lowering is slow)
        for chunk in (chunks if arch == "sm90" else [max(chunks)]):
            used = shared_memory_bytes(module, "base", (experts, chunk))
            # the [chunk] int64 copy of the experts and the [E] int32 segment bases
            assert used <= chunk * 8 + experts * 4 < H200_SHARED_BYTES, (arch, chunk, used)


@pytest.mark.parametrize("experts, chunk", [(1023, 4096), (513, 64)])
def test_chunk_counts_lower_for_expert_counts_past_the_threads(experts, chunk):
    """A [1, E] fragment of more experts than the 256 threads, not a multiple of them, has no TileLang
    layout ("no available layout found"): the expert axis, whose declared range reaches 1024, is padded to
    a power of two, and the padding is not stored."""
    for arch in ARCHS:
        module = _kernel("mapping_chunk_counts", arch)
        src = lower_source(module, "base", (experts, chunk))
        assert re.search(rf"< {experts}\)", src), arch          # the stores past the last expert are guarded


def test_a_fragment_written_one_slice_at_a_time_is_refused_on_cuda():
    """The printer refuses what TileLang 0.1.15 lowers wrong (see above), so a stage cannot bring it back;
    the C target's thread-local arrays take it."""
    from tkgen.ir import prim as ir, kernel as kir
    from tkgen.codegen.print_tilelang import KernelPrinter
    catalog = shipped_catalog()
    step = ir.Var("r_c", "i32")
    module = kir.Module("demo", "base", {}, (), (), ())
    for scope in ("tile", "shared"):
        dst = kir.Buffer("out", ("u", "c"), "i32", scope)
        write = kir.Compute(dst, ir.i32(0), at=(("c", step),))
        for arch in ("sm90", "cpu"):
            printer = KernelPrinter(catalog, catalog.archs[arch], module)
            if scope == "tile" and arch == "sm90":
                with pytest.raises(ValueError, match="collect it in shared memory"):
                    printer.target(write)
            else:
                assert printer.target(write) == "out[i_u, r_c]"
