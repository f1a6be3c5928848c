"""The property tests every spec gets: CPU kernel vs generated reference on drawn inputs (bit for bit
where declared), and each drawn specialization also lowered to CUDA source for sm_90a and sm_100a."""
import importlib

import pytest
from hypothesis import given, settings

from tkgen import registry
from tkgen.testing import check as C

from conftest import op_names


def _strategy(name):
    return importlib.import_module(registry.op_package(name).__name__ + ".strategies").cases()


def _examples(name):
    """The spec's `tests.examples` caps the profile's example count (each new specialization compiles)."""
    from tkgen.model import load_catalog
    spec = load_catalog(registry.specs_dir()).op(name)
    return min(settings.default.max_examples, spec.tests.get("examples", settings.default.max_examples))


@pytest.mark.parametrize("name", op_names())
def test_kernel_matches_reference_on_cpu(name):
    @settings(max_examples=_examples(name))
    @given(_strategy(name))
    def prop(case):
        C.run_case(name, case, "cpu")
        sources = C.lower_cuda(name, case)
        for arch, src in sources.items():
            assert "__global__" in src, arch
    prop()


@pytest.mark.parametrize("name", op_names())
def test_empty_and_single_row(name):
    @settings(max_examples=3)
    @given(_strategy(name))
    def prop(case):
        for rows in (0, 1):
            dyn = registry.op_package(name).OP.dynamic_dim
            c = {**case, "dims": {**case["dims"], dyn: rows}}
            c["shapes"] = {k: [rows] + list(v[1:]) for k, v in case["shapes"].items()}
            outs, _ = C.run_case(name, c, "cpu")
            assert all(o.shape[0] == rows for o in outs)
    prop()
