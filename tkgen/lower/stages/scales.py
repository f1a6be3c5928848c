"""Scales and number formats: scale pairs from an amax, format constants, rounding through a format, and
the exponent arithmetic of power-of-two scales."""
from __future__ import annotations

from ...spec import expr as E
from ...spec import formats as F
from ...ir import prim as ir
from ...ir.prim import F32, I32
from .base import Function, Stage, function, stage
from .elementwise import Map, define


@stage("scale_from_amax", args=("scale", "value", "element"), targets=2)
class ScaleFromAmax(Stage):
    """sf, inv = scale_from_amax(s, amax, f): the scale that dequantizes and the factor that quantizes,
    by the rule of scale format s for element format f."""

    def build(self, b, call, scale, amax, elem):
        idx = call.index
        if len(call.targets) != 2:
            b.fail(idx, "scale_from_amax produces two values: `sf, inv = scale_from_amax(...)`")
        sf, inv = F.scale_pair(scale.value, ir.Var(amax.name, F32), elem.max_value)
        for name, e in zip(call.targets, (sf, inv)):
            b.add(idx, Map(b.define(idx, name, amax.axes, F32), e))


@function("min_amax")
class MinAmax(Function):
    """`min_amax(fmt)`: the format's amax floor, a float32 constant."""

    def build(self, b, idx, node, axes):
        fmt = b.format_arg(idx, node.args[0], b.elements, "element")
        if fmt.min_amax is None:
            b.fail(idx, f"format {fmt.name!r} declares no min_amax", node)
        return ir.c(fmt.min_amax)


@function("round_to", arity=2)
class RoundTo(Function):
    """round_to(f, v): v rounded to element format f (a format, a param naming one, or an input, meaning
    that input's dtype) and widened back to f32, exactly."""

    def build(self, b, idx, node, axes):
        target, v = node.args[0], b.elementwise(idx, node.args[1], axes)
        if v.dtype != F32:
            b.fail(idx, "round_to rounds float values", node)
        if isinstance(target, E.Name) and target.id in b.spec.inputs:
            t = b.spec.inputs[target.id]
            if any(dt not in b.elements for dt in t.dtypes):
                b.fail(idx, f"round_to({target.id}, v): {target.id!r} has no float dtype", node)
            b.rounds.add(target.id)
            return ir.Call(f"ROUND_{target.id}", (v,), F32)
        fmt = b.format_arg(idx, target, b.elements, "element")
        return v if fmt.is_float32 else ir.Call(f"round_{fmt.name}", (v,), F32)


@stage("stochastic_round", args=("element", "value", "value"))
class StochasticRound(Stage):
    """y = stochastic_round(f, v, r): f32 value v rounded to element format f by the 16 random bits r (i32,
    in [0, 2^16)) of each element, as PTX's cvt.rs.satfinite (tkgen/spec/formats.py: stochastic_rounding); the
    result is a value of f, which an output in f stores exactly."""

    def build(self, b, call, fmt, v, r):
        idx = call.index
        if v.dtype != F32 or r.dtype != I32:
            b.fail(idx, f"stochastic_round(f, v, r) takes a float v and i32 random bits r, found {v.dtype} and "
                        f"{r.dtype}")
        try:
            lets, out = F.stochastic_rounding(fmt, ir.Var(v.name, F32), ir.Var(r.name, I32), "_" + call.targets[0])
        except ValueError as e:
            b.fail(idx, str(e), call.args[0])
        for name, e in lets:
            b.add(idx, Map(b.define(idx, name, b.axes_of(e), e.dtype), e))
        b.add(idx, Map(b.define(idx, call.targets[0], b.axes_of(out), F32), out))


def _exponent(fn, x):
    if x.dtype != F32:
        raise TypeError("takes a float value")
    return F.exponent_field(x)


def _exp2(fn, n):
    if n.dtype != I32:
        raise TypeError("takes an integer value (an exponent, e.g. from exponent(v)); 2^x of a float is not in the "
                        "library")
    return F.pow2_of_int(n)


define(("exponent",), 1, _exponent, "The biased exponent field of a float (bits 23-30), as i32.")
define(("exp2",), 1, _exp2, "2^n of an integer n, exactly (built from bits).")
