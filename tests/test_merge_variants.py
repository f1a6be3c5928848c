"""Variants merged into one function (tkgen/codegen/merge_variants.py): each variant's specialization builds the
PrimFunc and computes the reference its own function did, and only whole statements are chosen."""
import functools
import importlib
import importlib.util
import inspect

import pytest
import torch

from tkgen import registry
from tkgen.schedule import pipeline as S
from tkgen.codegen.generate import naive_modules
from tkgen.codegen.merge_variants import Printed, arg_name, merge, products
from tkgen.codegen.print_tilelang import print_factory
from tkgen.codegen.print_torch import print_reference
from tkgen.runtime.schedule import specialize, specialized

OP = "per_token_cast"
KERNEL_HEAD = ("import tilelang.language as T\n"
               "from tkgen.runtime.schedule import bank_pad, f32_bits, pad_pow2, pick_block, specialize  # noqa: F401\n"
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
    floor = spec.params["amax_floor"].default      # the statics in order: H, group, amax_floor, then the dtype
    for p in printed[::3]:          # every third variant: each build parses a prim_func
        for args in ((256, 128, floor, "bf16"), (96, 32, floor, "fp32")):
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
    floor = spec.params["amax_floor"].default
    for p in printed:
        want, got = getattr(own, p.name)(x, 64, floor), getattr(merged, p.name)(x, 64, floor)
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


def _name(v):
    return "_".join(f"{k.lstrip('?')}{v[k]}" for k in sorted(v))


def _merged_and_own(fns):
    """(merged sources, each variant's own function, each variant's specialization)."""
    functions, aliases = merge(fns, _name)
    own, merged = {}, {"specialize": specialize}
    exec("\n\n".join("\n".join(f.lines) for f in fns), own)
    exec("\n\n".join(functions) + "\n" + "\n".join(aliases), merged)
    return functions, own, merged


@pytest.mark.parametrize("first, second, why", [
    (["x = f(0)", "if n:", "    y = 2"], ["x = f(1)", "if k:", "    y = 2"], "a different block header"),
    (["x = f(0)", "y = 2"], ["x = f(1)", "y = 2", "w = 3"], "another line count"),
    (["x = f(0,", "    1)"], ["x = f(1,", "    1)"], "a statement over two lines"),
])
def test_functions_that_differ_in_whole_statements_are_merged(first, second, why):
    """A statement one variant has and another has not, or a block of another header, is chosen whole."""
    fns = [_fn("build_u", {"a": "u"}, first + SHARED), _fn("build_v", {"a": "v"}, second + SHARED)]
    functions, aliases = merge(fns, lambda v: "_".join(v.values()))
    assert len(functions) == 1 and len(aliases) == 2, why
    compile(functions[0], "merged", "exec")


def _traced(name, variant, body):
    """A function that records what it runs: `out` holds every step, so two functions that run the same
    steps return the same list."""
    return _fn(name, variant, ["out = []", *body, *[f"out.append({i})" for i in range(12)], "return out"])


def test_inserted_and_deleted_statements_sit_in_an_if_on_the_variant_key():
    base = ["out.append('a')", "for i in range(n):", "    out.append(i)", "out.append('b')"]
    fns = [_traced("build_plain", {"?w": False}, base),
           _traced("build_with_w", {"?w": True}, base[:1] + ["out.append('w0')", "out.append('w1')"] + base[1:] +
                   ["out.append(('w', k))"]),
           ]
    functions, own, merged = _merged_and_own(fns)
    assert len(functions) == 1
    src = functions[0]
    assert src.startswith("def make_variants(with_w, n, *, k=1):")
    assert "    if with_w:\n        out.append('w0')\n        out.append('w1')\n    for i in range(n):" in src
    for fn in fns:
        assert merged[fn.name](3, k=5) == own[fn.name](3, k=5), fn.name
    # a statement the first variant has and a later one has not (deleted): `if not ...`
    fns = [fns[1], fns[0]]
    functions, own, merged = _merged_and_own(fns)
    assert "    if with_w:" in functions[0]
    for fn in fns:
        assert merged[fn.name](2) == own[fn.name](2), fn.name


def test_statements_are_aligned_within_nested_blocks():
    """Bodies of blocks of one header are aligned in turn; an inserted block is chosen whole, and an
    `if` with an `else:` is one piece."""
    def body(a, b):
        inner = ["        out.append((i, j))"] + (["        out.append('b')"] if b else [])
        return (["for i in range(n):", "    out.append(i)"] + (["    out.append('a')"] if a else []) +
                ["    for j in range(2):", *inner] +
                (["    for j in range(k):", "        out.append(-j)"] if a and b else []) +
                (["if n > 2:", "    out.append('big')", "else:", "    out.append('small')"] if b else []))
    fns = [_traced(f"build_{a}_{b}", {"?p": a, "?q": b}, body(a, b)) for a in (False, True) for b in (False, True)]
    functions, own, merged = _merged_and_own(fns)
    assert len(functions) == 1
    src = functions[0]
    assert "            if with_q:\n                out.append('b')" in src            # inside the inner loop
    assert "        if with_p and with_q:\n            for j in range(k):" in src
    assert "    if with_q:\n        if n > 2:\n            out.append('big')\n        else:" in src
    for fn in fns:
        for n in (1, 3):
            assert merged[fn.name](n, k=2) == own[fn.name](n, k=2), fn.name


def _kernel(name, variant, params, body):
    """A kernel factory of TileLang source: `params` (name, annotation) of the prim_func, `body` its statements
    within the kernel's launch."""
    return Printed(variant, name, [f"def {name}(N, *, threads):", "    @T.prim_func", "    def kernel(",
                                   *[f"        {p}: {a}," for p, a in params], "    ):",
                                   "        with T.Kernel(1, threads=threads) as (pid,):",
                                   "            x = T.alloc_fragment((N,), 'float32')",
                                   *[f"            {line}" for line in body], "    return kernel"])


def test_kernels_whose_parameters_differ_share_one_factory(tmp_path):
    """An optional input present or absent: one prim_func lists every parameter, an absent one annotated
    `None` (not a kernel parameter), and the statements that read it sit in an `if` on its presence."""
    a, b, c = ("a", "T.Tensor((N,), 'float32')"), ("b", "T.Tensor((N,), 'float32')"), ("c", "T.Tensor((N,), 'float32')")
    load = ["for i in T.Parallel(N):", "    x[i] = a[i]"]
    add = ["for i in T.Parallel(N):", "    x[i] = x[i] + b[i]"]
    store = ["for i in T.Parallel(N):", "    c[i] = x[i] * T.float32(2.0)", "for i in T.Parallel(N):",
             "    c[i] = c[i] + T.float32(1.0)"]
    fns = [_kernel("build_base", {"?b": False}, [a, c], load + store),
           _kernel("build_with_b", {"?b": True}, [a, b, c], load + add + store)]
    functions, aliases = merge(fns, lambda v: "with_b" if v["?b"] else "base")
    assert len(functions) == 1 and len(aliases) == 2
    assert "        b: T.Tensor((N,), 'float32') if with_b else None," in functions[0]
    assert "            if with_b:\n                for i in T.Parallel(N):" in functions[0]
    head = "import tilelang.language as T\nfrom tkgen.runtime.schedule import specialize  # noqa: F401\n\n"
    own = _module(tmp_path, "own_k", head, ["\n".join(p.lines) for p in fns])
    merged = _module(tmp_path, "merged_k", head, functions, aliases)
    for fn in fns:
        want, got = getattr(own, fn.name)(64, threads=64), getattr(merged, fn.name)(64, threads=64)
        assert got.script() == want.script() and len(got.params) == len(want.params), fn.name
    # parameters in two orders cannot share one list
    fns[1] = _kernel("build_with_b", {"?b": True}, [c, a, b], load + add + store)
    assert len(merge(fns, lambda v: "with_b" if v["?b"] else "base")[0]) == 2


@pytest.mark.parametrize("first, second, why", [
    (["x = f(0)", "y = a"], ["x = f(1)", "y = a"], "a line naming the merged param"),
    (["x = f(0)"], ["x = f(1)"], "another signature"),
])
def test_functions_that_cannot_share_one_function_stay_apart(first, second, why):
    fns = [_fn("build_u", {"a": "u"}, first + SHARED), _fn("build_v", {"a": "v"}, second + SHARED)]
    if why == "another signature":
        fns[1].lines[0] = "def build_v(n, m, *, k=1):"
    functions, aliases = merge(fns, lambda v: "_".join(v.values()))
    assert len(functions) == 2 and not aliases, why
    # the same pair with the difference in one simple statement is merged
    fns = [_fn("build_u", {"a": "u"}, ["x = f(0)"] + SHARED), _fn("build_v", {"a": "v"}, ["x = f(1)"] + SHARED)]
    assert len(merge(fns, lambda v: "_".join(v.values()))[0]) == 1


def _flag_name(v):
    """Names as specs name them: a structural param's value, then `with_<x>` for each optional input given;
    `?t` goes with `?p` (given exactly when it is) and has no part of its own."""
    parts = [str(v[k]).lower() for k in v if not k.startswith("?")]
    parts += [f"with_{k[1:]}" for k in v if k.startswith("?") and v[k] and k != "?t"]
    return "_".join(parts) or "base"


@pytest.mark.parametrize("subset, calls, axis", [
    # the whole product, `?p` and `?t` one axis
    (lambda v: True, 1, "[('', False, False), ('with_p', True, True)]"),
    # the variants given `?p` or `?e`: a union of two products, `?p` given in one and not in the other
    (lambda v: v["?p"] or v["?e"], 2, "[('with_p', True, True)]"),
])
def test_variants_of_tied_inputs_are_written_as_products(subset, calls, axis):
    """Two arguments that go together (an optional input and one given with it) are one axis of the product
    (a list of (part of the name, values...)); variants that are the union of a few products take a call
    each; every name is bound to the arguments its alias line binds."""
    variants = [{"fast": f, "?w": w, "?p": p, "?t": p, "?e": e}
                for f in (False, True) for w in (False, True) for p in (False, True) for e in (False, True)]
    variants = [v for v in variants if subset(v)]
    fns = [Printed(v, f"build_{_flag_name(v)}", []) for v in variants]
    aliases = [f"{fn.name} = specialize(make_variants, {', '.join(repr(x) for x in fn.variant.values())})"
               for fn in fns]
    left, got = products(aliases, fns, _flag_name)
    assert not left and len(got) == calls
    assert axis in got[-1]
    table = {}
    for call in got:
        part = eval(call, {"specialized": specialized, "make_variants": print})
        assert not set(part) & set(table)
        table.update(part)
    assert {n: p.args for n, p in table.items()} == {fn.name: tuple(fn.variant.values()) for fn in fns}


def test_every_variant_of_every_op_is_bound_to_its_own_choices(catalog):
    """Through `factory()` (kernel modules) and the reference's tables, every variant of every op is its own
    function or a shared one with the arguments its name stands for bound: each bound argument is the
    shared function's parameter of that key (`arg_name`), and its value the variant's."""
    from tkgen.runtime.compile import factory

    def check(fn, own, variant, where):
        if not isinstance(fn, functools.partial):
            assert fn.__name__ == own, where
            return
        assert not fn.keywords, where
        params = list(inspect.signature(fn.func).parameters)[:len(fn.args)]
        names = {arg_name(k): k for k in variant}
        assert all(p in names for p in params), (where, params)
        assert fn.args == tuple(variant[names[p]] for p in params), (where, fn.args)
        # the parameters left are those of a variant's own function: no other key of the variant among them
        assert not set(inspect.signature(fn).parameters) & set(names), where

    checked = 0
    for op, spec in sorted(catalog.ops.items()):
        pkg = registry.op_package(op)
        kernels = [importlib.import_module(f"{pkg.__name__}.kernel_{t}") for t in ("cpu", "cuda")]
        ref = importlib.import_module(f"{pkg.__name__}.reference")
        rows = getattr(ref, "WRITTEN_ROWS", {})
        for variant in spec.variants():
            name = spec.variant_name(variant)
            for module in kernels:
                check(factory(module, name), f"build_{name}", variant, (module.__name__, name))
            check(ref.VARIANTS[name], f"reference_{name}", variant, (ref.__name__, name))
            if name in rows:
                check(rows[name], f"written_rows_{name}", variant, (ref.__name__, "rows", name))
            checked += 1
        assert set(ref.VARIANTS) == {spec.variant_name(v) for v in spec.variants()}, op
        assert set(rows) <= set(ref.VARIANTS), op
    assert checked > 800
