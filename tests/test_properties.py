"""The property tests every spec gets: CPU kernel vs generated reference on drawn inputs (bit for bit
where declared), and the drawn specializations also lowered to CUDA source, for sm_90a and sm_100a in
turn."""
import importlib
import os

import pytest
from hypothesis import given, settings

from tkgen import registry
from tkgen.testing import check as C

from conftest import op_names, shipped_catalog
from public_call import public_call_matches_run


def _strategies(name):
    return importlib.import_module(registry.op_package(name).__name__ + ".strategies")


def _strategy(name):
    return _strategies(name).cases()


def _tests(name):
    return shipped_catalog().op(name).tests


@pytest.mark.parametrize("name", op_names())
def test_kernel_matches_reference_on_cpu(name):
    """`tests.examples` caps the example count and `tests.cuda_lowerings` the specializations lowered to
    CUDA. Each new specialization compiles a C kernel and lowers to CUDA, seconds each: the first for
    every CUDA profile, each later one for one profile in turn (the profiles' kernels differ only in their
    knobs and target). The first few cases also run with no rows and with one, on the kernel they
    compiled (the row count is a runtime size), and through the public call (tkgen.ops) at several row
    counts against the checked `run` (tests/public_call.py)."""
    tests = _tests(name)
    profiles = C.cuda_archs()
    op = registry.op_package(name).OP
    lowered = set()
    row_cases = max(1, min(3, tests.get("examples", 9) // 3))
    ran = []

    @settings(max_examples=min(settings.default.max_examples, tests.get("examples", settings.default.max_examples)))
    @given(_strategy(name))
    def prop(case):
        C.run_case(name, case, "cpu")
        if len(ran) < row_cases:
            _empty_and_single_row(name, op, case)
        if len(ran) < 3:            # on the kernel just compiled: no compile of its own
            public_call_matches_run(name, case)
        ran.append(case)
        spec = C.specialization(op, case)
        if spec not in lowered and len(lowered) < tests.get("cuda_lowerings", float("inf")):
            archs = profiles if not lowered else (profiles[len(lowered) % len(profiles)],)
            lowered.add(spec)
            for arch, src in C.lower_cuda(name, case, archs).items():
                assert "__global__" in src, arch
    prop()


def _pinned():
    ops = shipped_catalog().ops
    return [n for n in sorted(ops) if ops[n].tests.get("cuda_cases")]


@pytest.mark.parametrize("name", _pinned())
def test_pinned_cases_lower_for_cuda(name):
    """`tests.cuda_cases`: specializations lowered for every CUDA profile whatever the strategies draw
    (params that once failed to lower or ran wrong on a GPU)."""
    op = registry.op_package(name).OP
    for pinned in _tests(name)["cuda_cases"]:
        case = {"dims": dict(pinned.get("dims", {})),
                "params": {**{p.name: p.default for p in op.params}, **pinned.get("params", {})},
                "inputs": {i.name: None for i in op.inputs}}
        for arch, src in C.lower_cuda(name, case).items():
            assert "__global__" in src, (arch, pinned)


def _empty_and_single_row(name, op, case):
    for rows in (0, 1):
        c = C.with_rows(op, case, rows)
        outs, _ = C.run_case(name, c, "cpu")      # shapes and values checked against the reference
        # no rows: outputs over the rows are empty, sums over them are zero-filled at their full shape
        dims = {**c["dims"], **c["params"]}
        variant = C.variant_of(op, c["params"], c["inputs"])
        assert [tuple(o.shape) for o in outs] == [tuple(i.shape_fn(dims, variant)) for i in op.outputs]
