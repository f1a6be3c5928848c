"""The CUDA profiles pad whole reduced axes to a power of two (warp reductions want one); the CPU profile
does not. So that the padded schedules (guards of loads and stores, neutral values in the padding of a
reduction) run where tests run, each op is also generated for the CPU profile with `pad_reduced: true` and
checked against its reference, outputs inside poisoned canary margins (`tkgen.testing.check.poisoned`).
A store of a padding element that lands on a real element of its own tensor is a race on a GPU but an
overwrite in order on the CPU, so the scheduled IR is also checked: every store over a padded axis (or
the packets of one) is guarded on it, by the verifier's `guarded` invariant after every pass of every
profile (tkgen/ir/verify.py, tests/test_passes.py)."""
import dataclasses
import importlib
import sys
import types

import pytest
from hypothesis import given, settings

from tkgen.codegen import generate
from tkgen import registry
from tkgen.lower.stages import build_program
from tkgen.testing import check as C

from conftest import op_names, shipped_catalog

ARCH = "cpu_padded"


def _padded_module(name, tmp_path_factory):
    """The op's CPU kernel module regenerated with padded reduced axes, importable as kernel_cpu_padded,
    and its knob table, knobs_cpu_padded."""
    pkg = registry.op_package(name)
    if f"{pkg.__name__}.knobs_{ARCH}" in sys.modules:
        return
    catalog = shipped_catalog()
    arch = dataclasses.replace(catalog.archs["cpu"], name=ARCH, pad_reduced=True)
    spec = catalog.op(name)
    kernels = generate.kernel_module(catalog, spec, arch, generate.naive_modules(catalog, spec))
    header = "# padded tiles: a test of tests/"
    table = generate.knob_table(spec.name, arch, f"kernel_{ARCH}", kernels.knobs, header)
    folder = tmp_path_factory.mktemp(name)
    for module_name, source in ((f"kernel_{ARCH}", f"{header}\n{kernels.text}"), (f"knobs_{ARCH}", table)):
        path = folder / f"{module_name}.py"
        path.write_text(source)
        module = types.ModuleType(f"{pkg.__name__}.{module_name}")
        module.__file__, module.__package__ = str(path), pkg.__name__
        exec(compile(source, str(path), "exec"), module.__dict__)
        sys.modules[module.__name__] = module
    importlib.invalidate_caches()


def _padded_ops():
    catalog = shipped_catalog()
    out = []
    for name in op_names():
        spec = catalog.op(name)
        # the stage programs alone say which axes are held whole (no lowering at collection time)
        if any(build_program(spec, catalog.elements, catalog.scales, v).whole_axes for v in spec.variants()):
            out.append(name)
    return out


@pytest.mark.parametrize("name", _padded_ops())
def test_padded_reduced_axes_store_nothing_outside(name, tmp_path_factory):
    _padded_module(name, tmp_path_factory)

    @settings(max_examples=3, deadline=None)
    @given(importlib.import_module(registry.op_package(name).__name__ + ".strategies").cases())
    def prop(case):
        C.run_case(name, case, "cpu", arch=ARCH)
    prop()


def test_a_block_of_packed_row_groups_holds_whole_words(tmp_path_factory):
    """per_channel_cast_from_fp8's UE8M0 scales pack four row groups per int32, and a block stores whole
    words. With groups of 128 tokens by 128 channels a group fills the tile budget of 16384 elements, and
    the padded profile (as CUDA's) cut the block to one group: the block holding group 0 stored word 0 with
    the other three bytes empty, and group 1 of a 129-token input was lost. fit_rows now keeps the pack."""
    from tkgen.runtime.schedule import fit_rows
    assert fit_rows(4, 16384, 16384) == 1 and fit_rows(4, 16384, 16384, 4) == 4 and fit_rows(8, 16384, 2048, 4) == 8
    name = "per_channel_cast_from_fp8"
    _padded_module(name, tmp_path_factory)
    for tokens in (129, 300, 513):
        case = {"dims": {"T": tokens, "H": 128},
                "params": {"fmt": "e4m3", "group_tokens": 128, "in_group": 128, "in_scale": "fp32", "scale": "ue8m0"},
                "shapes": {"q": [tokens, 128], "sf": (tokens, 1)},
                "inputs": {"q": {"dtype": "e4m3", "seed": tokens, "scale_exp": 0, "style": "normal", "specials": []},
                           "sf": {"dtype": "fp32", "seed": 1, "scale_exp": 0, "style": "normal", "specials": []}}}
        C.run_case(name, case, "cpu", arch=ARCH)
