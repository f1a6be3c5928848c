"""Building blocks the generated strategies are written in.

Inputs are drawn as *recipes* (a seed, a magnitude, a value style and a list of special values placed at
drawn positions), not as raw tensors: Hypothesis shrinks recipes well (fewer specials, smaller seeds,
fewer rows), and a recipe prints as a line of JSON that replays the failure exactly.
"""
from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

SPECIALS = ("zero_rows", "max", "subnormal", "ties", "neg_zero", "inf", "nan", "huge", "tiny")


def rows(max_rows: int):
    """Row counts of the dynamic dim, favouring 0, 1, small odd counts and a block tail."""
    return st.one_of(st.sampled_from([0, 1, 2, 3, 5, 7, 17]), st.integers(0, max_rows))


def edges(lo: int, hi: int):
    """Values of an integer range param worth a kernel each: both ends, their neighbours, powers of two
    and one odd value inside. Every value is a separate compiled kernel, so the draw favours boundaries
    over a uniform sweep."""
    vals = {lo, lo + 1, hi - 1, hi, (lo + hi) // 2 | 1}
    vals |= {1 << i for i in range(12) if lo <= 1 << i <= hi}
    return sorted(v for v in vals if lo <= v <= hi)


def choose(draw, name, candidates, bound, requires):
    """Draw `name` from candidates that keep every requirement whose names are then all bound."""
    ok = []
    for v in dict.fromkeys(candidates):
        trial = {**bound, name: v}
        if all(fn(trial) for names, fn in requires if name in names and all(n in trial for n in names)):
            ok.append(v)
    assume(ok)
    return draw(st.sampled_from(ok))


@st.composite
def tensor_recipe(draw, dtypes, specials, finite=True, max_abs=None):
    """How to draw an input's values (tkgen/testing/inputs.py: materialize); `max_abs` is the spec's
    `values: max_abs`, a bound on every drawn magnitude."""
    kinds = [k for k in specials if not (finite and k in ("inf", "nan"))]
    special = st.tuples(st.sampled_from(kinds), st.integers(0, 1 << 16), st.integers(0, 1 << 16),
                        st.integers(1, 8))
    specials_list = st.lists(special, max_size=6) if kinds else st.just([])
    bound = {} if max_abs is None else {"max_abs": max_abs}
    return {
        **bound,
        "dtype": draw(st.sampled_from(list(dtypes))),
        "seed": draw(st.integers(0, 2 ** 31 - 1)),
        "scale_exp": draw(st.integers(-24, 24)),
        "style": draw(st.sampled_from(["normal", "discrete", "wide"])),
        "specials": [list(s) for s in draw(specials_list)],
    }


def with_codec(recipe: dict, codec, logical):
    """A recipe for an input declared with a format: values drawn as float32 over the logical shape, then
    encoded into the format's container. Returns (recipe, container shape)."""
    if codec is None:
        return recipe, list(logical)
    codes, elems = codec["packet"]
    shape = list(logical[:-1]) + [-(-logical[-1] // codes) * elems]
    return {**recipe, "codec": codec, "logical": list(logical)}, shape
