"""Variants merged into one function (tkgen/codegen/merge_variants.py): each variant's specialization builds the
PrimFunc and computes the reference its own function did, and only whole statements are chosen."""
import importlib
import importlib.util

import pytest
import torch

from tkgen import registry
from tkgen.schedule import pipeline as S
from tkgen.codegen.generate import naive_modules
from tkgen.codegen.merge_variants import Printed, merge
from tkgen.codegen.print_tilelang import print_factory
from tkgen.codegen.print_torch import print_reference

OP = "per_token_cast"
KERNEL_HEAD = ("import tilelang.language as T\n"
               "from tkgen.runtime.schedule import bank_pad, pad_pow2, pick_block, specialize  # noqa: F401\n"
               "from tkgen_generated.common.tilelang_helpers import *  # noqa: F401,F403\n\n")
REFERENCE_HEAD = ("from tkgen.runtime.schedule import specialize  # noqa: F401\n"
                  "from tkgen.runtime.torch_prims import *  # noqa: F401,F403\n"
                  "from tkgen_generated.common.torch_helpers import *  # noqa: F401,F403\n\n")


def _module(tmp_path, name, head, functions, aliases=()):
    """A module from source on disk (TileLang's parser reads a prim_func's source)."""
    path = tmp_path / f"{name}.py"
    path.write_text(head + "\n\n".join(functions) + "\n" + "\n".join(aliases) + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _printed(catalog, kind):
    """(spec, each variant's printed function, the knobs of each kernel factory on the CPU profile)."""
    spec = catalog.ops[OP]
    out, knobs = [], {}
    for variant, program, module in naive_modules(catalog, spec):
        name = spec.variant_name(variant)
        if kind == "kernel":
            arch = catalog.archs["cpu"]
            scheduled = S.apply(module, catalog, arch, S.resolve(spec, arch))
            lines, _ = print_factory(catalog, arch, scheduled, f"build_{name}")
            out.append(Printed(variant, f"build_{name}", lines))
            knobs[f"build_{name}"] = dict(scheduled.knobs)
        else:
            lines, _ = print_reference(catalog, spec.resolved(variant), module, f"reference_{name}")
            out.append(Printed(variant, f"reference_{name}", lines))
    return spec, out, knobs


def test_merged_factories_build_each_variant_s_prim_func(catalog, tmp_path):
    registry.op_package(OP)
    spec, printed, knobs = _printed(catalog, "kernel")
    functions, aliases = merge(printed, spec.variant_name)
    assert len(functions) < len(printed) / 3 and len(aliases) > len(printed) / 2
    own = _module(tmp_path, "own", KERNEL_HEAD, ["\n".join(p.lines) for p in printed])
    merged = _module(tmp_path, "merged", KERNEL_HEAD, functions, aliases)
    for p in printed[::3]:          # every third variant: each build parses a prim_func
        for args in ((256, 128, "bf16"), (96, 32, "fp32")):
            got = getattr(merged, p.name)(*args, **knobs[p.name]).script()
            assert got == getattr(own, p.name)(*args, **knobs[p.name]).script(), p.name


def test_merged_references_compute_each_variant_s_bits(catalog, tmp_path):
    registry.op_package(OP)
    spec, printed, _ = _printed(catalog, "reference")
    functions, aliases = merge(printed, spec.variant_name, "make_reference_")
    assert len(functions) < len(printed) / 2
    own = _module(tmp_path, "own_ref", REFERENCE_HEAD, ["\n".join(p.lines) for p in printed])
    merged = _module(tmp_path, "merged_ref", REFERENCE_HEAD, functions, aliases)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(0)) * 3
    x[1, :7] = 0.0
    for p in printed:
        want, got = getattr(own, p.name)(x, 64), getattr(merged, p.name)(x, 64)
        for w, g in zip(want, got):
            w, g = w.reshape(-1), g.reshape(-1)     # col-major scales are strided views
            assert w.dtype == g.dtype and torch.equal(w.view(torch.uint8), g.view(torch.uint8)), p.name


def _fn(name, variant, body):
    return Printed(variant, name, [f"def {name}(n, *, k=1):", *[f"    {line}" for line in body]])


def test_only_whole_statements_are_chosen_and_conditions_are_exclusive():
    fns = [_fn(f"build_{a}_{b}", {"a": a, "b": b}, [f"x = f({a!r})", "for i in range(n):",
                                                  f"    y = g(i, {b!r})", "return x"])
           for a in ("p", "q") for b in ("r", "s", "t")]
    functions, aliases = merge(fns, lambda v: "_".join(map(str, v.values())))
    assert len(functions) == 1 and len(aliases) == 6
    src = functions[0]
    assert src.startswith("def make_variants(a, b, n, *, k=1):")
    assert "    if a == 'p':\n        x = f('p')\n    if a == 'q':" in src
    assert "        if b in ('s', 't'):" not in src and "        if b == 't':\n            y = g(i, 't')" in src
    assert "elif" not in src and "else" not in src
    assert aliases[0] == "build_p_r = specialize(make_variants, 'p', 'r')"


SHARED = [f"z{i} = h({i})" for i in range(12)]       # enough shared lines that merging would pay


@pytest.mark.parametrize("first, second, why", [
    (["x = f(0)", "if n:", "    y = 2"], ["x = f(1)", "if k:", "    y = 2"], "a different block header"),
    (["x = f(0)", "y = 2"], ["x = f(1)", "y = 2", "w = 3"], "another line count"),
    (["x = f(0,", "    1)"], ["x = f(1,", "    1)"], "a statement over two lines"),
    (["x = f(0)", "y = a"], ["x = f(1)", "y = a"], "a line naming the merged param"),
])
def test_functions_that_differ_in_structure_stay_apart(first, second, why):
    fns = [_fn("build_u", {"a": "u"}, first + SHARED), _fn("build_v", {"a": "v"}, second + SHARED)]
    functions, aliases = merge(fns, lambda v: "_".join(v.values()))
    assert len(functions) == 2 and not aliases, why
    # the same pair with the difference in one simple statement is merged
    fns = [_fn("build_u", {"a": "u"}, ["x = f(0)"] + SHARED), _fn("build_v", {"a": "v"}, ["x = f(1)"] + SHARED)]
    assert len(merge(fns, lambda v: "_".join(v.values()))[0]) == 1
