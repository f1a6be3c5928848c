"""Operation counts of an op's compute, read from its stages: the x axis of the roofline.

One count per IR operation per element it produces (a codec helper call counts as one), one per element a
reduction or a count reads, and one per element per round of a top-k. Loads and stores count as bytes, not work.
"""
from __future__ import annotations

from math import prod

from . import ir
from .expr import evaluate
from .stages import Count, Map, Reduce, TopK, build_program


def _ops(e) -> int:
    return int(isinstance(e, (ir.Op, ir.Call))) + sum(_ops(a) for a in ir.children(e))


def op_count(spec, catalog, env: dict) -> int:
    """Operations of one call with sizes and params `env` (dims and params by name)."""
    variant = {p.name: env[p.name] for p in spec.structural_params}
    variant.update({f"?{n}": env.get(f"?{n}", False) for n in spec.optional_inputs})   # optional inputs given
    program = build_program(spec, catalog.elements, catalog.scales, variant)
    size = lambda axes: prod(evaluate(spec.axes[a].extent, env) for a in axes)  # noqa: E731
    total = 0
    for st in program.steps:
        if isinstance(st, Map):
            total += _ops(st.expr) * size(st.out.axes)
        elif isinstance(st, Reduce):
            total += size(st.src.axes)
        elif isinstance(st, TopK):
            total += size(st.src.axes) * evaluate(spec.axes[st.new].extent, env)
        elif isinstance(st, Count):       # the condition, and the sum of its ones
            total += (_ops(st.expr) + 1) * size(st.axes)
    return total
