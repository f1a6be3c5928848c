"""`moe_capacity_mask`: capacity dispatch built on a prefix along the rows (tkgen/schedule/row_scans.py),
for any number of tokens, against an independent implementation of its definition (one-hot counts and a
cumulative sum over the flattened slots in token-major order)."""
import pytest
import torch

import tkgen.ops as ops
from tkgen.ir import kernel as kir
from tkgen.codegen import generate
from tkgen.schedule import passes as PS
from tkgen.schedule import pipeline as S

from conftest import shipped_catalog


def capacity_dispatch(topk_idx, num_experts, capacity):
    """(mask, slot, kept) from the definition: a slot's rank is the number of earlier slots (t * K + k
    ascending) that chose its expert, here its place in a stable sort by expert less its expert's start;
    it is kept where the rank is below the capacity."""
    flat = topk_idx.reshape(-1)
    valid = (flat >= 0) & (flat < num_experts)          # -1, or any id past the experts: none
    expert = torch.where(valid, flat, torch.full_like(flat, num_experts))     # unrouted sort last
    order = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert, minlength=num_experts + 1)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(flat)
    rank[order] = torch.arange(flat.numel()) - starts[expert[order]]
    keep = valid & (rank < capacity)
    slot = torch.where(keep, rank, torch.full_like(rank, -1)).to(torch.int32).reshape(topk_idx.shape)
    kept = torch.minimum(counts[:num_experts], torch.tensor(capacity)).to(torch.int32)
    return keep.to(torch.int32).reshape(topk_idx.shape), slot, kept


def _routing(tokens, k, experts, seed, none=0.1):
    """Distinct experts per token (as a top-k gives), about `none` of the slots unrouted (-1)."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.rand(tokens, experts, generator=g).argsort(dim=1)[:, :k]
    return torch.where(torch.rand(tokens, k, generator=g) < none, torch.full_like(idx, -1), idx)


@pytest.mark.parametrize("tokens, k, experts, capacity", [
    (0, 2, 4, 1),                 # no rows
    (1, 1, 1, 0),                 # capacity 0: nothing kept
    (300, 8, 64, 30),             # about the mean load: some experts drop
    (2001, 2, 8, 2147483647),     # nothing dropped
    (50_000, 8, 1024, 350),       # many row tiles per block; 1024 experts
])
def test_capacity_dispatch_matches_its_definition(tokens, k, experts, capacity):
    idx = _routing(tokens, k, experts, seed=tokens + experts)
    got = ops.moe_capacity_mask(idx, experts, capacity)
    want = capacity_dispatch(idx, experts, capacity)
    for name, g, w in zip(("mask", "slot", "kept"), got, want):
        assert g.dtype == w.dtype and torch.equal(g, w), name



def test_one_kernel_serves_every_capacity():
    """`capacity` is a runtime param: the kernels take it as an argument, so calls with other capacities
    (0, the mean load, past every count, the int32 maximum) build nothing new and each matches the definition."""
    from tkgen.runtime.compile import STATS
    idx = _routing(777, 4, 16, seed=3)
    ops.moe_capacity_mask(idx, 16, 1)
    builds = STATS["builds"]
    for capacity in (0, 1, 190, 777 * 4, 2147483647):
        got = ops.moe_capacity_mask(idx, 16, capacity)
        for name, g, w in zip(("mask", "slot", "kept"), got, capacity_dispatch(idx, 16, capacity)):
            assert torch.equal(g, w), (capacity, name)
    assert STATS["builds"] == builds
    import importlib
    import inspect
    from tkgen import registry
    pkg = registry.op_package("moe_capacity_mask")
    assert pkg.OP.factory_args == ("K", "num_experts") and pkg.OP.scalar_args == ("capacity",)
    factory = importlib.import_module(pkg.__name__ + ".kernel_cpu").build_base
    assert "capacity" not in inspect.signature(factory).parameters
    assert [p.name for p in factory(4, 16, threads=1, block_t=16, blocks=2).params][-1] == "capacity"
    with pytest.raises(ValueError, match="capacity"):
        ops.moe_capacity_mask(idx, 16, -1)

def test_repeated_unrouted_and_unknown_experts_count_in_token_major_order():
    """The same expert twice in a row (not a top-k's output, but admitted) ranks by k; -1 and ids outside
    the experts (3, -7, 2**40) count nothing and get no slot."""
    idx = torch.tensor([[2, 2, -1], [-1, 2, 0], [0, 2, 2], [-1, -1, -1], [3, -7, 2 ** 40]])
    mask, slot, kept = ops.moe_capacity_mask(idx, 3, 3)
    assert slot.tolist() == [[0, 1, -1], [-1, 2, 0], [1, -1, -1], [-1, -1, -1], [-1, -1, -1]]
    assert mask.tolist() == [[1, 1, 0], [0, 1, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert kept.tolist() == [2, 0, 3]
    wide = torch.randint(-3, 12, (500, 4), generator=torch.Generator().manual_seed(5))
    for got, want in zip(ops.moe_capacity_mask(wide, 8, 40), capacity_dispatch(wide, 8, 40)):
        assert torch.equal(got, want)


def test_the_kernels_split_the_rows_across_blocks_in_two_launches():
    """scan_rows: the op's kernel is preceded by one that stores each block's row sums, which the op's
    kernel adds up for the blocks before its own; on every profile, with a scratch of [blocks, experts]."""
    catalog = shipped_catalog()
    spec = catalog.op("moe_capacity_mask")
    for arch in catalog.archs.values():
        for variant, program, module in generate.naive_modules(catalog, spec):
            assert module.row_carries == ("before_run",)
            out = PS.run(module, PS.Context(catalog, arch, S.resolve(spec, arch)), verify=True)
            first, second = out.kernels
            assert first.persistent and second.persistent and first.name.startswith("scan_partials")
            assert not any(isinstance(s, kir.Store) and not s.tensor.startswith("scratch_")
                           for s in kir.statements(first.body))
            assert [t.name for t in out.tensors if t.role == "scratch"] == ["scratch_before_run"]
            assert dict(out.knobs)["blocks"] == arch.persistent_blocks


def test_a_float_prefix_along_the_rows_is_refused(tmp_path):
    from tkgen.spec.loader import SpecError
    from tkgen.driver import load_catalog
    import shutil
    from tkgen import registry
    specs = tmp_path / "specs"
    shutil.copytree(registry.specs_dir() / "formats", specs / "formats")
    shutil.copytree(registry.specs_dir() / "archs", specs / "archs")
    (specs / "demo").mkdir()
    (specs / "demo" / "running_sum.yaml").write_text(
        "op: running_sum\nfamily: demo\ndoc: a float prefix over the rows\n"
        "dims: {T: {dynamic: true, doc: rows}}\naxes: {t: T}\n"
        "inputs: {x: {dtype: fp32, shape: [T], view: [t]}}\n"
        "outputs: {y: {dtype: fp32, shape: [T], view: [t]}}\n"
        "compute:\n  - v = load(x)\n  - y = prefix(v, t)\n")
    with pytest.raises(SpecError, match="prefix along the rows .* sums integers"):
        load_catalog(specs)
