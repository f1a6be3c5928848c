"""Declared passes: each rewrite of a schedule is a named pass, and each backend's pipeline is a list of them.

A pass is a function `fn(module, ctx, **params) -> module` registered under a name with `@register`, in
the module of tkgen/schedule/ that holds its rewrite; its keyword parameters (typed: int, str, bool, or
Optional of them) are what a pipeline entry may set. `ctx` (`Context`) carries what passes read besides
the module: the spec, the stage program, the catalog, the profile, the resolved schedule, and the naive
module the pipeline started from.

A pipeline is data: a list of entries, each a pass name or a one-key mapping `{name: {param: value}}`.
`PIPELINES` holds the default of each backend; a profile overrides it with `passes:` (the same list,
tkgen/spec/schema/arch.schema.json), and an op's `schedule:` (by default or for one arch) with `passes:`
too, or sets parameters of the passes in it with `pass_params: {pass: {param: value}}` (what `tkgen tune`
writes when it sweeps a pass parameter). Adding a pass is one module with a registered function, plus its
place in a pipeline: every module of tkgen/schedule/ is imported when the registry is first read.

`run` applies a pipeline; with `verify` on (tests, `tkgen validate`), the module is checked after every
pass by tkgen/ir/verify.py, and a failure names the pass and the statement.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import typing
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ..ir import kernel as kir
from ..ir import verify as V


@dataclass(frozen=True)
class Pass:
    """A named rewrite: `fn(module, ctx, **params)`; `params`: name -> (type, default);
    `establishes`: invariants the verifier checks from this pass on (see tkgen/ir/verify.py)."""

    name: str
    fn: Callable
    params: Dict[str, Tuple[type, object]]
    doc: str
    establishes: Tuple[str, ...] = ()


@dataclass
class Context:
    """What passes read besides the module: the catalog (formats), the profile, the resolved schedule, and
    the naive module the pipeline started from. Not the spec nor the stage program: what a pass needs of
    them the lowering put in the module (tkgen/ir/kernel.py: Axis, Module)."""

    catalog: object
    arch: object
    sched: dict
    naive: kir.Module = None


REGISTRY: Dict[str, Pass] = {}

# the default pipeline of each backend (a profile's `passes:` replaces its backend's)
_FRONT = ["plan_tiles", "guard_out_of_range", "mask_nan_reductions", "stage_transposed_stores", "inline_stored",
          "read_fold_sources", "replan_tiles"]
PIPELINES: Dict[str, List[object]] = {
    "cuda": _FRONT + [{"stream": {"kind": "pipelined", "stages": 2}}, "place_gemm", "go_persistent", "scan_rows",
                      "zero_padding_rows", "fuse", "recompute_index_values", "share_broadcasts",
                      "coalesce_widening_loads", "unroll_fetching_loops",
                      "vector_knobs", "index_tiles", "bulk_copies", "pipeline_copies", "check_tile_bytes"],
    "cpu": _FRONT + [{"stream": {"kind": "serial"}}, "expand_gemm", "go_persistent", "scan_rows", "zero_padding_rows", "fuse",
                     "vector_knobs", "index_tiles", "bulk_copies", "pipeline_copies", "check_tile_bytes"],
}

_SIMPLE = (int, str, bool, float)


def _param_type(hint):
    """int, str, bool or float, from an annotation (Optional[X] gives X)."""
    if hint in _SIMPLE:
        return hint
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and args[0] in _SIMPLE:
        return args[0]
    raise TypeError(f"a pass parameter must be int, str, bool or float (or Optional of one), not {hint}")


def register(name: str, establishes: Tuple[str, ...] = ()):
    """Register `fn(module, ctx, **params)` as pass `name`."""
    def deco(fn):
        if name in REGISTRY and REGISTRY[name].fn is not fn:
            raise ValueError(f"pass {name!r} registered twice")
        hints = typing.get_type_hints(fn)
        params = {}
        for p in list(inspect.signature(fn).parameters.values())[2:]:
            params[p.name] = (_param_type(hints[p.name]), p.default)
        doc = (inspect.getdoc(fn) or "").split("\n\n")[0].replace("\n", " ")
        REGISTRY[name] = Pass(name, fn, params, doc, tuple(establishes))
        return fn
    return deco


_loaded = False


def registry() -> Dict[str, Pass]:
    """Every registered pass, by name (the modules of tkgen/schedule/ imported once)."""
    global _loaded
    if not _loaded:
        pkg = importlib.import_module(__package__)
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{__package__}.{info.name}")
        _loaded = True
    return REGISTRY


def parse(entries) -> List[Tuple[str, dict]]:
    """A pipeline's entries as (pass name, params), checked against the registry (unknown passes and
    parameters, and values of the wrong type, raise ValueError)."""
    passes = registry()
    out = []
    for entry in entries:
        if isinstance(entry, str):
            name, params = entry, {}
        elif isinstance(entry, dict) and len(entry) == 1:
            (name, params), = entry.items()
            params = dict(params or {})
        else:
            raise ValueError(f"a pipeline entry is a pass name or {{name: {{param: value}}}}, not {entry!r}")
        if name not in passes:
            raise ValueError(f"unknown pass {name!r} (passes: {', '.join(sorted(passes))})")
        for k, v in params.items():
            if k not in passes[name].params:
                raise ValueError(f"pass {name!r} has no parameter {k!r} "
                                 f"(parameters: {', '.join(passes[name].params) or 'none'})")
            want = passes[name].params[k][0]
            if not (isinstance(v, want) and not (want is int and isinstance(v, bool))):
                raise ValueError(f"pass {name!r}: parameter {k!r} must be {want.__name__}, not {v!r}")
        out.append((name, params))
    return out


def pipeline_for(arch, sched: Optional[dict] = None) -> List[Tuple[str, dict]]:
    """The pipeline an op runs on a profile: the schedule's `passes` (an op's `schedule:`) if it has them,
    else the profile's `passes:`, else its backend's default; then the schedule's `pass_params` set
    parameters of passes in it (a pass the pipeline does not run is an error)."""
    sched = sched or {}
    declared = sched.get("passes", getattr(arch, "passes", None))
    steps = parse(declared if declared is not None else PIPELINES[arch.backend])
    for name, params in sched.get("pass_params", {}).items():
        parse([{name: params}])                    # the pass and its parameters exist, of the right types
        if not any(n == name for n, _ in steps):
            raise ValueError(f"pass_params sets pass {name!r}, which the pipeline does not run "
                             f"(passes: {', '.join(n for n, _ in steps)})")
        steps = [(n, {**p, **params} if n == name else p) for n, p in steps]
    return steps


@dataclass
class Trace:
    """What `run` saw: (pass name, params, module after it), in order (for `tkgen show --passes`)."""

    steps: List[Tuple[str, dict, kir.Module]] = field(default_factory=list)


def run(module: kir.Module, ctx: Context, pipeline=None, verify: bool = False,
        trace: Optional[Trace] = None) -> kir.Module:
    """`module` through `pipeline` (default: the profile's); with `verify`, checked after every pass."""
    passes = registry()
    steps = pipeline_for(ctx.arch, ctx.sched) if pipeline is None else parse(pipeline)
    ctx = dataclasses.replace(ctx, naive=module) if ctx.naive is None else ctx
    invariants = set()
    if verify:
        V.verify(module, invariants, where="the naive module")
    for name, params in steps:
        p = passes[name]
        module = p.fn(module, ctx, **params)
        invariants.update(p.establishes)
        if verify:
            V.verify(module, invariants, where=f"pass {name!r}")
        if trace is not None:
            trace.steps.append((name, params, module))
    return module
