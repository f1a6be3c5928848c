"""The stage library: what the functions of a `compute:` block mean.

A compute block is a list of statements such as `amax = max(absmax(xf, c), 1e-4)`. The builder
(builder.py) checks them (names, arities, axes, dtypes) and turns them, for one variant of an op, into a
`Program`: a list of steps over named values. Each value carries the axes it varies over; elementwise
expressions broadcast over axes, reductions remove one, top-k replaces one. Elementwise expressions become
primitive IR (tkgen/ir/prim.py), so the kernel and the reference print the same arithmetic.

Each stage is one class, in the module of its family, registered under the names specs write
(base.py: STAGES, FUNCTIONS): its type rule and expansion (`build`) and the lowering of the steps it
produces to the kernel IR (`Step.lower`, called by tkgen/lower/lowering.py). Adding a capability means adding a
class there, never raw TileLang inside a spec.

Families: elementwise.py (expressions, operators, math functions), memory.py (load, copy, take, positions),
reductions.py (absmax, amax, amin, sum, fold), iterations.py (alternate_normalize and its gradient: loops with
carried state), products.py (matmul), selection.py (topk), rows.py (keep_rows, count, join), scales.py
(scale_from_amax, min_amax, round_to, exponent, exp2).
"""
from __future__ import annotations

from . import elementwise, iterations, memory, products, reductions, rows, scales, selection
from .base import FUNCTIONS, RAW, STAGES, Program, StageError, Step, Value
from .builder import Builder, build_program, in_user_terms
from .elementwise import Map
from .memory import Copy, Gather, Load
from .reductions import Reduce, neutral
from .rows import Count
from .selection import TopK, topk_key

__all__ = ["FUNCTIONS", "RAW", "STAGES", "Program", "StageError", "Step", "Value", "Builder", "build_program",
           "Map", "Copy", "Gather", "Load", "Reduce", "neutral", "Count", "TopK", "topk_key", "typecheck"]


def typecheck(spec, elements, scales, lower=None):
    """Check every variant's compute block, and with `lower(variant, program)` its lowering too; errors
    point at the stage's line (and column) in the spec. Returns (variant, program, what `lower` returned)
    per variant."""
    out = []
    for variant in spec.variants():
        try:
            program = build_program(spec, elements, scales, variant)
            out.append((variant, program, lower(variant, program) if lower is not None else None))
        except StageError as e:
            message = in_user_terms(spec, e.message)
            if e.field_path is not None:
                raise spec.doc_ref.error(e.field_path, message) from None
            raise spec.doc_ref.error(("compute", e.stage_index), message, col_offset=e.col) from None
    return out
