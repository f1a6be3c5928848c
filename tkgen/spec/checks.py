"""The checks that make `validate` mean what it says: what passes generates, and the generated modules import.

The model (tkgen/spec/model.py) resolves names and references; these checks hold every value of a spec, format or
profile to the rules of tkgen/spec/safety.py and to sense: names that generated code can use, sizes that are
positive and bounded, non-empty ranges, defaults inside them, no constant division by zero, conditions that
are conditions, schedules that name axes, profiles whose tuned schedules and native formats exist. Each
failure is a SpecError at the value's own line and column (a bad key at the key).
"""
from __future__ import annotations

from . import expr as E
from . import safety as S
from .safety import listing, short


def fail(doc, path, problem):
    if problem:
        raise doc.error(path, problem)


def fail_key(doc, path, problem):
    if problem:
        raise doc.key_error(path, problem)


# -- operators ----------------------------------------------------------------------------------------
def check_op(doc, spec):
    """Every check of an operator spec that the model's resolution of names does not already make."""
    check_value_names(doc, spec)
    check_variants(doc, spec)
    kinds = _name_kinds(spec)
    check_expressions(doc, spec, kinds)
    check_params(doc, spec)
    check_dims(doc, spec)
    check_tensors(doc, spec)
    check_sizes_at_samples(doc, spec)
    check_bindings(doc, spec)
    for key, block in spec.schedule.items():
        check_schedule(doc, spec, ("schedule", key), block)
    check_workloads(doc, spec)
    check_backward_names(doc, spec)


def check_declared_names(doc):
    """Declared names become Python identifiers, and string choices parts of them: a strict pattern, no
    keyword, builtin or name the generated code uses. Checked first, on the file's data, so that a hostile
    name is reported where it is written, before anything looks it up."""
    d = doc.data
    fail(doc, ("op",), S.name_problem(d["op"]))
    fail(doc, ("family",), S.name_problem(d["family"]))
    axes, inputs = list(d["axes"]), list(d["inputs"])
    for section, kind in (("params", "name"), ("dims", "dim"), ("axes", "name"), ("inputs", "name"),
                          ("outputs", "name")):
        for name in d.get(section, {}):
            fail_key(doc, (section, name), S.name_problem(name, kind) or S.lowering_name_problem(name, axes, inputs))
    for name, p in d.get("params", {}).items():
        choices = p.get("one_of", ())
        if choices and all(isinstance(v, str) for v in choices):
            for i, v in enumerate(choices):
                fail(doc, ("params", name, "one_of", i), S.fragment_problem(v))


def check_value_names(doc, spec):
    """The values compute statements assign are Python names in kernels and references."""
    for st in spec.stages:
        for target in st.targets:
            problem = S.name_problem(target) or S.lowering_name_problem(target, spec.axes, spec.inputs)
            fail(doc, ("compute", st.index), problem)


def check_variants(doc, spec):
    """Each variant is a kernel factory per profile: a bounded number of them, with distinct names."""
    count = 1
    for p in spec.structural_params:
        count *= len(p.choices)
    count *= 2 ** (len(spec.optional_inputs) + len(spec.optional_params))
    if count > S.MAX_VARIANTS:
        raise doc.key_error(("params",), f"{count} variants (structural params times optional inputs and params); "
                                     f"at most {S.MAX_VARIANTS}")
    seen = {}
    for v in spec.variants():
        name = spec.variant_name(v)
        if name in seen:
            raise doc.key_error(("params",), f"two variants are both named {name!r} ({seen[name]} and {v}); "
                                         "rename a value so that joined with `_` they differ")
        seen[name] = v


def _name_kinds(spec):
    """The type of each name in constant expressions: dims and integer params are integers."""
    kinds = {n: "int" for n in spec.dims}
    for p in spec.params.values():
        kinds[p.name] = ("float" if p.kind == "float" else "bool" if p.boolean else
                         "str" if p.structural else "int")
    return kinds


def _constant_expressions(spec):
    """(field path, node, what) of every constant expression: extents, shapes, ranges, requirements."""
    for name, ax in spec.axes.items():
        yield ("axes", name), ax.extent, "size"
    for role, tensors in (("inputs", spec.inputs), ("outputs", spec.outputs)):
        for name, t in tensors.items():
            for i, s in enumerate(t.shape):
                yield (role, name, "shape", i), s, "size"
            for param, shape, _, _ in t.layouts:
                for i, s in enumerate(shape):
                    yield (role, name, "when", param, "shape", i), s, "size"
            for i, r in enumerate(t.values.get("range", ())):
                yield (role, name, "values", "range", i), E.parse(r), "integer"
    for p in spec.params.values():
        for i, r in enumerate(p.range or ()):
            yield ("params", p.name, "range", i), r, "integer"
    for dim in spec.dims.values():
        for i, (_, node) in enumerate(dim.require):
            yield ("dims", dim.name, "require", i), node, "condition"


def check_expressions(doc, spec, kinds):
    """Sizes are integer expressions, requirements conditions; no constant divisor is zero; a constant size
    is in [1, MAX_SIZE]."""
    for path, node, what in _constant_expressions(spec):
        try:
            kind = E.constant_kind(node, kinds)
        except E.ExprError as e:
            raise doc.error(path, e.message, col_offset=e.col) from None
        want = "bool" if what == "condition" else "int"
        if kind != want:
            expected = "a condition (a comparison, `and`, `or`, `not`)" if want == "bool" else "an integer expression"
            raise doc.error(path, f"expected {expected}, found {kind} {short(E.to_source(node))}")
        call = _unprintable_call(node)
        if call is not None:
            raise doc.error(path, f"{call.fn}() cannot be generated in shapes, sizes and requirements; use "
                                  f"{listing(sorted(PRINTABLE_FUNCTIONS))}", col_offset=call.col)
        zero = E.zero_divisor(node)
        if zero is not None:
            raise doc.error(path, f"division by zero in {short(E.to_source(zero))}", col_offset=zero.col)
        if what == "size" and not E.names(node):
            try:
                value = E.evaluate(node, {})
            except (ValueError, ArithmeticError) as e:
                raise doc.error(path, f"{short(E.to_source(node))}: {e}") from None
            fail(doc, path, S.int_problem(value, 1, S.MAX_SIZE, "a size"))


# the functions of constant expressions that generated code can print (tkgen/spec/pyexpr.py: py_expr)
PRINTABLE_FUNCTIONS = frozenset({"min", "max", "ceildiv", "align"})


def _unprintable_call(node):
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, E.Call) and n.fn not in PRINTABLE_FUNCTIONS:
            return n
        stack.extend(E.children(n))
    return None


def _sized(node):
    """The names of a size that must be positive: a sum is positive where its first term is, and a later
    addend may be 0 (`num_topk + num_shared`)."""
    if isinstance(node, E.Binary) and node.op == "+":
        return _sized(node.lhs)
    return E.names(node)


def _size_names(spec):
    """Names that size something or divide: they must be positive."""
    used = set()
    for _, node, what in _constant_expressions(spec):
        if what == "size":
            used |= _sized(node)
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, E.Binary) and n.op in ("/", "//", "%"):
                used |= E.names(n.rhs)
            stack.extend(E.children(n))
    return used


def check_params(doc, spec):
    sizes = _size_names(spec)
    raw = doc.data.get("params", {})
    for p in spec.params.values():
        base = ("params", p.name)
        lo = 1 if p.name in sizes else -S.MAX_SIZE
        if p.kind == "float":
            for i, v in enumerate(raw[p.name].get("test_values", ())):
                fail(doc, base + ("test_values", i), S.float_problem(v))
            if p.optional:
                fail(doc, base + ("absent",), S.float_problem(raw[p.name]["absent"], allow_inf=True))
            else:
                fail(doc, base + ("default",), S.float_problem(raw[p.name]["default"]))
            continue
        if p.choices is not None:
            check_choices(doc, spec, p, lo)
            continue
        default = raw[p.name].get("default")
        if default is not None:
            fail(doc, base + ("default",), S.int_problem(default, lo, S.MAX_SIZE, "an integer default"))
        ends = []
        for i, node in enumerate(p.range):
            if not E.names(node):
                ends.append(E.evaluate(node, {}))
                fail(doc, base + ("range", i), S.int_problem(ends[-1], lo, S.MAX_SIZE, "a range end"))
        if len(ends) == 2 and ends[0] > ends[1]:
            raise doc.error(base + ("range",), f"empty range [{ends[0]}, {ends[1]}]")
        if len(ends) == 2 and default is not None and not ends[0] <= default <= ends[1]:
            raise doc.error(base + ("default",), f"default {default} is outside the range [{ends[0]}, {ends[1]}]")


def check_choices(doc, spec, p, lo):
    """A one_of: all strings (structural values, parts of generated names), all booleans, or integers with
    strings naming dims (`group: [32, H]`); no repeats; a default of the same type among them."""
    base = ("params", p.name, "one_of")
    strings = all(isinstance(v, str) for v in p.choices)
    for i, v in enumerate(p.choices):
        if strings:
            continue                     # parts of generated names: checked with the declared names
        if isinstance(v, str) and v not in spec.dims:
            raise doc.error(base + (i,), f"{v!r}: a string among numbers names a dim; dims are {listing(spec.dims)}")
        elif not isinstance(v, (str, bool)):
            fail(doc, base + (i,), S.int_problem(v, lo, S.MAX_SIZE, "a size or group" if lo == 1 else "an integer"))
    for i, v in enumerate(p.choices):
        if any(type(w) is type(v) and w == v for w in p.choices[:i]):
            raise doc.error(base + (i,), f"{short(v)} is listed twice")
    default = doc.data["params"][p.name].get("default")
    if default is not None and not any(type(default) is type(v) and default == v for v in p.choices):
        raise doc.error(("params", p.name, "default"),
                        f"default {short(default)} is not one of {listing(map(repr, p.choices))}")


def check_dims(doc, spec):
    for dim in spec.dims.values():
        base = ("dims", dim.name)
        fail(doc, base + ("min",), S.int_problem(dim.min, 0, S.MAX_SIZE, "a minimum size"))
        if dim.max is not None:
            fail(doc, base + ("max",), S.int_problem(dim.max, 1, S.MAX_SIZE, "a maximum size"))
            if dim.min > dim.max:
                raise doc.error(base + ("min",), f"min {dim.min} is larger than max {dim.max}")
        # test values outside [min, max] are dropped by the strategies (documented); absurd ones are errors
        for i, v in enumerate(dim.test_values):
            fail(doc, base + ("test_values", i), S.int_problem(v, 0, S.MAX_SIZE, "a test size"))


def check_tensors(doc, spec):
    for role, tensors in (("inputs", spec.inputs), ("outputs", spec.outputs)):
        for name, t in tensors.items():
            base = (role, name)
            if t.optional:
                fail(doc, base + ("absent",), S.float_problem(t.absent, allow_inf=True))
            exact = t.exact if isinstance(t.exact, dict) else {}
            for key in ("rtol", "atol"):
                if key in exact.get("tol", {}):
                    fail(doc, base + ("exact", "tol", key), S.float_problem(exact["tol"][key], lo=0.0))
            tol = exact.get("tol", {})
            if (tol.get("atol_of") == "terms") != ("terms" in tol):
                raise doc.error(base + ("exact", "tol"), "`atol_of: terms` and `terms: [inputs]` go together: "
                                                         "terms names the inputs each term of the sum is a product of")
            for i, n in enumerate(tol.get("terms", ())):
                if n not in spec.inputs:
                    raise doc.error(base + ("exact", "tol", "terms", i), f"unknown input {n!r} in `terms`"
                                    f"{S.did_you_mean(n, spec.inputs)} (inputs are {S.listing(spec.inputs)})")
                if spec.inputs[n].format_ref or spec.inputs[n].scale_ref:
                    raise doc.error(base + ("exact", "tol", "terms", i), f"`terms` names inputs of a dtype whose "
                                    f"values torch reads; {n!r} holds coded elements")
            if "ulp" in exact:
                fail(doc, base + ("exact", "ulp"), S.int_problem(exact["ulp"], 0, 2 ** 31 - 1, "a number of ulps"))
            rng = t.values.get("range")
            if rng is not None and not any(E.names(E.parse(r)) for r in rng):
                lo, hi = (E.evaluate(E.parse(r), {}) for r in rng)
                if lo > hi:
                    raise doc.error(base + ("values", "range"), f"empty range [{lo}, {hi}]")


MAX_SAMPLES = 256          # assignments of dims and params the evaluated checks try


def admitted_sizes(spec, at_max=True):
    """Assignments of every dim and integer param that the spec admits (its requirements hold): each dim at
    its min, max and test values, each param at its choices or the ends of its range, every combination
    when there are few, else the corners and a fixed sample of the rest. `at_max=False`: the sizes the
    spec names, without the dims' max (an unbounded dim is still tried at min + 7 and 4096)."""
    import itertools
    import random
    dims = {}
    for d in spec.dims.values():
        lo, hi = max(d.min, 1), d.max if d.max is not None else None
        vals = {lo, *(v for v in d.test_values if v >= lo and (hi is None or v <= hi))}
        vals |= ({hi} if at_max else set()) if hi is not None else {lo + 7, 4096}
        dims[d.name] = sorted(vals)
    params = {}
    for p in spec.params.values():
        if p.kind == "float" or p.structural:
            continue
        if p.choices is not None:
            params[p.name] = list(p.choices)
        elif p.range and not any(E.names(n) for n in p.range):
            params[p.name] = sorted({E.evaluate(n, {}) for n in p.range})
    names = [*dims, *params]
    options = [*dims.values(), *params.values()]
    total = 1
    for o in options:
        total *= len(o)
    if total <= MAX_SAMPLES:
        combos = list(itertools.product(*options))
    else:
        rng = random.Random(0)
        combos = [tuple(o[0] for o in options), tuple(o[-1] for o in options)]
        combos += [tuple(rng.choice(o) for o in options) for _ in range(MAX_SAMPLES - 2)]
    for combo in combos:
        env = dict(zip(names, combo))
        for n, v in list(env.items()):
            if isinstance(v, str):                  # a choice naming a dim (`group: [32, H]`)
                env[n] = env[v]
        for p in spec.params.values():
            if p.structural:
                env[p.name] = p.default if p.default is not None else p.choices[0]
        try:
            if all(E.evaluate(node, env) for d in spec.dims.values() for _, node in d.require):
                yield env
        except (E.ExprError, ValueError, ArithmeticError, TypeError):
            continue


def _at(env, node):
    names = sorted(E.names(node))
    return ", ".join(f"{n} = {env[n]}" for n in names if n in env)


def check_sizes_at_samples(doc, spec):
    """What only values of the dims and params show, at assignments the spec admits (`admitted_sizes`): no
    negative shape, no axis extent past MAX_SIZE, no empty `values: range`, and views whose axes' extents
    multiply to the size of the tensor dim they index. Each at its own field."""
    def value(node, env):
        try:
            return E.evaluate(node, env)
        except (E.ExprError, ValueError, ArithmeticError, TypeError):
            return None
    envs = list(admitted_sizes(spec))
    for env in envs:
        for name, ax in spec.axes.items():
            v = value(ax.extent, env)
            if v is not None and not 0 <= v <= S.MAX_SIZE:
                raise doc.error(("axes", name), f"axis extent {short(ax.text)} is {v} at {_at(env, ax.extent)}; "
                                                f"expected a size in [0, {S.MAX_SIZE}]")
        for role, tensors in (("inputs", spec.inputs), ("outputs", spec.outputs)):
            for name, t in tensors.items():
                base = (role, name)
                for i, node in enumerate(t.shape):
                    v = value(node, env)
                    if v is not None and not 0 <= v <= S.MAX_SIZE:
                        raise doc.error(base + ("shape", i), f"shape entry {short(t.shape_text[i])} is {v} at "
                                                              f"{_at(env, node)}; expected a size in [0, {S.MAX_SIZE}]")
                rng = t.values.get("range")
                if rng is not None:
                    lo, hi = (value(E.parse(r), env) for r in rng)
                    if lo is not None and hi is not None and lo > hi:
                        nodes = E.Binary("-", E.parse(rng[0]), E.parse(rng[1]))
                        raise doc.error(base + ("values", "range"), f"empty range [{lo}, {hi}] at {_at(env, nodes)}")
                _check_view_extents(doc, spec, t, base, env, value)
        for p in spec.params.values():
            if p.range and any(E.names(n) for n in p.range):
                lo, hi = (value(n, env) for n in p.range)
                if lo is not None and hi is not None and lo > hi:
                    raise doc.error(("params", p.name, "range"), f"empty range [{lo}, {hi}] at "
                                                                 f"{_at(env, E.Binary('-', *p.range))}")


def _check_view_extents(doc, spec, t, base, env, value):
    """A view's axes split the tensor dim they index: their extents multiply to its size. Not checked where
    the two legitimately differ: packed or scale containers (the shape counts words or padded scales),
    segments (several views of one dim), and flat positions (no view)."""
    if t.at and not t.row_view or t.segments or t.scale_ref or t.layout_ref:
        return
    if t.format_ref and t.role == "input":
        return
    layouts = [((), t.shape, t.shape_text, t.view)] + [(("when", p), sh, tx, vw) for p, sh, tx, vw in t.layouts]
    for where, shape, text, view in layouts:
        entries = list(zip(range(len(shape)), shape, text))
        if t.row_view:           # rows at positions: the view indexes the dims after the first
            entries, view = entries[1:], t.row_view
        if len(entries) != len(view):
            continue
        for (i, node, shape_text), axes in zip(entries, view):
            size = value(node, env)
            extents = [value(spec.axes[a].extent, env) for a in axes if a in spec.axes]
            if size is None or len(extents) != len(axes) or None in extents:
                continue
            inner = 1
            for x in extents[1:]:
                inner *= x
            product = extents[0] * inner
            # the major axis may round up (`ceildiv(N, 1024)` blocks of 1024: the kernels guard the last one)
            if not size <= product < size + inner:
                raise doc.error(base + where + ("view", i),
                                f"the view's axes {' x '.join(axes)} span {product} elements but the shape's entry "
                                f"{short(shape_text)} is {size} at {_at(env, node) or 'every size'}")


def binding(node, dims):
    """(dim, factor) when a shape entry is a dim or a constant multiple of one (`H`, `2 * H`), else None:
    the size of that tensor dim binds the dim at call time."""
    if isinstance(node, E.Name) and node.id in dims:
        return node.id, 1
    if isinstance(node, E.Binary) and node.op == "*":
        for k, n in ((node.lhs, node.rhs), (node.rhs, node.lhs)):
            if isinstance(k, E.Num) and isinstance(k.value, int) and k.value > 0 and isinstance(n, E.Name) and n.id in dims:
                return n.id, k.value
    return None


def check_bindings(doc, spec):
    """Every dim's size is read from an input's shape at the call (`H`, or a multiple `2 * H`), whatever
    the call leaves out: a dim that only an optional input's shape names would be unknown when that input
    is None (except a runtime size of tensors addressed `at:` positions, which sizes nothing else). The last
    dim of a scale input does not bind (a packed scale may end in a partial word)."""
    def binds(t):
        shape = t.shape[:-1] if t.scale_ref else t.shape
        return {binding(s, spec.dims)[0] for s in shape if binding(s, spec.dims)}
    required = set().union(*[binds(t) for t in spec.inputs.values() if not t.optional])
    for name, dim in spec.dims.items():
        if name in required:
            continue
        given = [t.name for t in spec.inputs.values() if name in binds(t)]
        if given and dim.dynamic and name != spec.dynamic_dim:
            continue
        if given:
            raise doc.key_error(("dims", name), f"dim {name!r} is bound only by the shape of optional input "
                                                f"{given[0]!r}: a call without it cannot know its size; name it "
                                                "in a required input's shape")
        raise doc.key_error(("dims", name), f"dim {name!r} appears in no input's shape as `{name}` or "
                                            f"`k * {name}`, so a call cannot know its size")


def check_schedule(doc, spec, path, block_layer):
    """A schedule layer (the spec's default or arch block, or a profile's tuned entry): block keys are axes."""
    for key in ("block", "stream"):
        for axis in block_layer.get(key, {}):
            if axis not in spec.axes:
                raise doc.key_error(path + (key, axis), f"unknown axis {axis!r} in `{key}`"
                                                        f"{S.did_you_mean(axis, spec.axes)} (axes are {listing(spec.axes)})")


def check_workloads(doc, spec):
    """Workloads (bench, tune): dims and params of the spec, with values it accepts."""
    required = {s.id for t in spec.inputs.values() if not t.optional for s in t.shape if isinstance(s, E.Name)}
    for i, w in enumerate(spec.workloads):
        base = ("workloads", i)
        for name, value in w["dims"].items():
            if name not in spec.dims:
                raise doc.key_error(base + ("dims", name), f"unknown dim {name!r}{S.did_you_mean(name, spec.dims)} "
                                                                 f"(dims are {listing(spec.dims)})")
            dim = spec.dims[name]
            fail(doc, base + ("dims", name), S.int_problem(value, dim.min, dim.max if dim.max is not None else S.MAX_SIZE,
                                                           f"a size of {name} within its min and max"))
        missing = [n for n in spec.dims if n in required and n not in w["dims"]]
        if missing:
            raise doc.error(base + ("dims",), f"missing the size of {listing(missing)}")
        for name, value in w.get("params", {}).items():
            if name not in spec.params:
                raise doc.key_error(base + ("params", name), f"unknown param {name!r}"
                                    f"{S.did_you_mean(name, spec.params)} (params are {listing(spec.params)})")
            check_param_value(doc, base + ("params", name), spec, spec.params[name], value)
        for name, value in w.get("dtypes", {}).items():
            if name not in spec.inputs:
                raise doc.key_error(base + ("dtypes", name), f"unknown input {name!r}"
                                    f"{S.did_you_mean(name, spec.inputs)} (inputs are {listing(spec.inputs)})")
            choices = spec.inputs[name].dtypes
            if not choices and value != "present":
                # its storage follows its format (a scale format's param): only its presence can be said
                raise doc.error(base + ("dtypes", name), f"input {name!r} has no dtype to choose (its storage "
                                                         f"follows its format): write `{name}: present` to give it")
            if choices and value not in choices:
                raise doc.error(base + ("dtypes", name), f"expected one of {listing(choices)}, found {short(value)}")


def check_param_value(doc, path, spec, p, value):
    if p.kind == "float":
        fail(doc, path, None if value is None and p.optional else S.float_problem(value))
    elif p.choices is not None:
        if not any(type(value) is type(c) and value == c for c in p.choices):
            raise doc.error(path, f"expected one of {listing(map(repr, p.choices))}, found {short(value)}")
    else:
        fail(doc, path, S.int_problem(value, -S.MAX_SIZE, S.MAX_SIZE))


def check_backward_names(doc, spec):
    bw = spec.backward or {}
    if "function" in bw:
        fail(doc, ("backward", "function"), S.name_problem(bw["function"]))
        if bw["function"] == spec.name or bw["function"] in spec.tensors or bw["function"] in spec.params:
            raise doc.error(("backward", "function"), f"{bw['function']!r} is already a name of {spec.name}")


# -- formats and profiles -----------------------------------------------------------------------------
def check_format(doc):
    """Names of a format and the dtypes it is held in come from fixed tables; numbers are bounded."""
    d = doc.data
    fail(doc, ("format",), S.fragment_problem(d["format"]))
    cont = d.get("container", {})
    if "torch" in cont:
        fail(doc, ("container", "torch"), S.dtype_problem(cont["torch"], S.CONTAINER_DTYPES, "a torch dtype"))
    if "storage" in cont:
        fail(doc, ("container", "storage"), S.dtype_problem(cont["storage"], S.STORAGE_DTYPES, "a storage dtype"))
    for backend, dtype in d.get("native", {}).items():
        if backend not in S.BACKENDS:
            raise doc.key_error(("native", backend), f"expected a backend ({listing(S.BACKENDS)}), found {short(backend)}")
        fail(doc, ("native", backend), S.dtype_problem(dtype, S.STORAGE_DTYPES, "a TileLang dtype"))
    if "min_amax" in d:
        fail(doc, ("min_amax",), S.float_problem(d["min_amax"], lo=0.0))


def check_arch(doc):
    """A profile's own values (its references to formats and ops are checked with the catalog)."""
    d = doc.data
    fail(doc, ("arch",), S.fragment_problem(d["arch"]))
    for i, name in enumerate(d["native_formats"]):
        fail(doc, ("native_formats", i), S.fragment_problem(name))
    for op in d.get("tuned", {}):
        fail_key(doc, ("tuned", op), S.fragment_problem(op))


def check_profiles(catalog):
    """What profiles name: native formats that exist, tuned schedules whose blocks name the op's axes.

    A tuned entry of an op that is not in this catalog is never read (a profile copied into a spec tree
    with other operators) and is left alone."""
    for arch in catalog.archs.values():
        doc = catalog.documents[arch.path]
        for i, name in enumerate(arch.native_formats):
            if name not in catalog.elements:
                raise doc.error(("native_formats", i), f"unknown element format {name!r}; expected one of "
                                                       f"{listing(sorted(catalog.elements))}")
        for op, layer in arch.tuned.items():
            if op in catalog.ops:
                check_schedule(doc, catalog.ops[op], ("tuned", op), layer)

