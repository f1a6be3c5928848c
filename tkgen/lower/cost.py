"""Operation counts of an op's compute, read from its stages: the x axis of the roofline.

One count per IR operation per element it produces (a codec helper call counts as one), one per element a
reduction or a count reads, and one per element per round of a top-k. Loads and stores count as bytes, not work.
"""
from __future__ import annotations

from math import prod

from ..spec.expr import evaluate
from .stages import build_program


def op_count(spec, catalog, env: dict) -> int:
    """Operations of one call with sizes and params `env` (dims and params by name)."""
    variant = {p.name: env[p.name] for p in spec.structural_params}
    variant.update({f"?{n}": env.get(f"?{n}", False) for n in spec.optional_inputs})   # optional inputs given
    program = build_program(spec, catalog.elements, catalog.scales, variant)
    extent = lambda axis: evaluate(spec.axes[axis].extent, env)  # noqa: E731
    size = lambda axes: prod(extent(a) for a in axes)  # noqa: E731
    return sum(st.work(size, extent) for st in program.steps)
