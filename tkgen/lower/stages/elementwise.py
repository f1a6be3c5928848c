"""Elementwise stages: expressions over values (`Map`), their operators, and the functions of the library.

An elementwise expression varies over the union of its operands' axes (operands broadcast). It becomes
primitive IR (tkgen/ir/prim.py), which the kernel and the reference print alike, so they perform the same
operations in the same order. Integer operators (i32 and i64, wrapping) are defined for every operand, so
that no target traps and all agree: `a // 0` and `a % 0` are 0, `a // -1` is `-a`, and shift amounts are
taken modulo the width (`a << 33` on i32 is `a << 1`).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ...spec import expr as E
from ...ir import prim as ir, kernel as kir
from ...ir.prim import I32, op
from .base import INTS, RAW, Function, Stage, Step, Value, expr_work, function, stage

_BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "==": "eq", "!=": "ne", "<": "lt", "<=": "le",
           ">": "gt", ">=": "ge", "and": "and", "or": "or", "&": "bitand", "|": "bitor", "^": "bitxor"}
_WIDTH = {ir.I32: 32, ir.I64: 64}


@dataclass(frozen=True)
class Map(Step):
    """A value computed elementwise from other values (`expr` names them as Vars, and axis indices as
    `#axis`)."""

    out: Value
    expr: ir.Expr

    def sources(self):
        return ir.var_names(self.expr)

    def work(self, size, extent):
        return expr_work(self.expr) * size(self.out.axes)

    def lower(self, lw):
        # a broadcast of copied elements keeps their element type
        elem = lw.bufs[self.expr.name].elem if self.out.dtype == RAW else None
        lw.emit(kir.Compute(lw.buffer(self.out, elem=elem), lw.convert(self.expr)))
        if lw.program.keep is not None and self.out.name == lw.program.keep.name:
            lw.keep = lw.read(self.out)


def assign(b, idx, targets, node):
    """`name = expression`: a Map, except that a value over no axes (constants, params, an absent input,
    folded) is inlined where it is used, and a value that folds to another value is another name for it."""
    if len(targets) != 1:
        b.fail(idx, "an elementwise expression produces one value")
    name = targets[0]
    size = _size_expression(b, node)
    if size is not None and name not in b.spec.outputs:
        b.size(idx, name, size)
        return
    e = ir.fold(b.elementwise(idx, node, set()))
    axes = b.axes_of(e)          # after folding: `a0 > inf or pad` may not vary at all
    if name not in b.spec.outputs and not axes:
        b.constant(idx, name, e)
        return
    v = b.define(idx, name, axes, e.dtype)
    if name not in b.spec.outputs and isinstance(e, ir.Var) and e.name in b.values:
        b.values[name] = b.values[e.name]     # another name for a value: no copy
    else:
        b.add(idx, Map(v, e))


_SIZE_OPS = ("+", "-", "*", "//", "%")


def _size_expression(b, node):
    """The statement as a size computed once, in Python, by the factory and the reference, when it is
    integer arithmetic (+ - * // %) of integer params, static dims, integer literals and earlier such
    sizes, with at least one `//` or `%` (TileKernels' per-rank counts: `n // num_ep_ranks`); else None.
    Earlier sizes are substituted, so the expression names params and dims only."""
    def walk(n):
        if isinstance(n, E.Num):
            return n if isinstance(n.value, int) and not isinstance(n.value, bool) else None
        if isinstance(n, E.Name):
            if n.id in b.sizes:
                return b.sizes[n.id]
            p, d = b.spec.params.get(n.id), b.spec.dims.get(n.id)
            ok = (p is not None and p.range is not None) or (d is not None and not d.dynamic)
            return n if ok else None
        if isinstance(n, E.Unary) and n.op == "-":
            a = walk(n.arg)
            return None if a is None else E.Unary("-", a, n.col)
        if isinstance(n, E.Binary) and n.op in _SIZE_OPS:
            lhs, rhs = walk(n.lhs), walk(n.rhs)
            return None if lhs is None or rhs is None else E.Binary(n.op, lhs, rhs, n.col)
        return None
    def divides(n):
        return isinstance(n, E.Binary) and (n.op in ("//", "%") or divides(n.lhs) or divides(n.rhs))
    out = walk(node)
    return out if out is not None and (divides(node) or E.names(node) & set(b.sizes)) else None


def unary(b, idx, node, a):
    try:
        return op("neg", a) if node.op == "-" else op("not", a)
    except TypeError as e:
        b.fail(idx, f"operator {node.op!r}: {e}", node)


def binary(b, idx, node, lhs, rhs):
    o = node.op
    if o == "/" and lhs.dtype in INTS:
        b.fail(idx, "'/' divides floats; integers divide with '//' (floor) and '%'", node)
    if o in ("//", "%", "<<", ">>"):
        if lhs.dtype not in INTS or rhs.dtype != lhs.dtype:
            b.fail(idx, f"operator {o!r} takes integers, found {lhs.dtype} and {rhs.dtype}", node)
        if o in ("<<", ">>"):
            # the amount modulo the width: every amount is defined, and the same on every target
            amount = op("bitand", rhs, ir.Const(_WIDTH[lhs.dtype] - 1, lhs.dtype))
            return op("shl" if o == "<<" else "shr", lhs, amount)
        if isinstance(rhs, ir.Const) and rhs.value == 0:
            b.fail(idx, f"operator {o!r}: division by zero", node)
        return _divide(o, lhs, rhs)
    try:
        return op(_BINOPS[o], lhs, rhs)
    except (TypeError, KeyError) as e:
        b.fail(idx, f"operator {o!r}: {e}", node)


def _divide(o, a, d):
    """Floor division and modulo (Python's: the remainder has the divisor's sign), total: a divisor of 0
    gives 0 (as in NumPy), and -1 never reaches the machine division (INT_MIN / -1 traps on x86)."""
    dt = a.dtype
    zero, minus_one = ir.Const(0, dt), ir.Const(-1, dt)
    if isinstance(d, ir.Const) and d.value != -1:
        return op("floordiv" if o == "//" else "floormod", a, d)
    special = op("or", op("eq", d, zero), op("eq", d, minus_one))
    safe = op("select", special, ir.Const(1, dt), d)
    if o == "%":
        return op("select", special, zero, op("floormod", a, safe))
    return op("select", op("eq", d, zero), zero,
              op("select", op("eq", d, minus_one), op("neg", a), op("floordiv", a, safe)))


# -- functions --------------------------------------------------------------------------------------------
class Operands(Function):
    """A function of its operands' IR: `apply(fn, *operands)` (raising TypeError for operands it does not
    take)."""

    def build(self, b, idx, node, axes):
        return self.apply(node.fn, *b.operands(idx, node.args, axes))


def define(names, arity, apply, doc) -> type:
    """Register an elementwise function of its operands (one class, made here)."""
    cls = type("".join(n.title() for n in names[0].split("_")), (Operands,),
               {"apply": staticmethod(apply), "__doc__": doc})
    return function(*names, arity=arity)(cls)


def _sigmoid(fn, x):
    one = ir.c(1.0)
    return op("div", one, op("add", one, op("exp", op("neg", x))))


define(("max", "min"), 2, lambda fn, x, y: op(fn, x, y), "The larger (smaller) of two values.")
define(("abs",), 1, lambda fn, x: op("max", x, op("neg", x)),
       "Printed as max(x, -x): TileLang's float `abs` does not build on the C target.")
define(("clamp",), 3, lambda fn, x, lo, hi: op("min", op("max", x, lo), hi), "min(max(x, lo), hi).")
define(("where",), 3, lambda fn, c, x, y: op("select", c, x, y), "x where c holds, else y.")
define(("sigmoid",), 1, _sigmoid, "1 / (1 + exp(-x)).")
define(("exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "erf"), 1, lambda fn, x: op(fn, x),
       "The targets' library functions (mirrored by the reference: tkgen/runtime/torch_prims.py).")


def _f32(v: float) -> ir.Const:
    """A double rounded to float32, as torch's kernels round their `const scalar_t` constants."""
    return ir.c(struct.unpack("<f", struct.pack("<f", v))[0])


# torch's constants (ATen/native/cpu/Activation.cpp, the CUDA kernels alike): M_SQRT1_2, and
# M_SQRT2 * M_2_SQRTPI * 0.5 = sqrt(2 / pi), each a double rounded to float32
_SQRT1_2 = _f32(0.70710678118654752440)
_SQRT_2_PI = _f32(1.41421356237309504880 * 1.12837916709551257390 * 0.5)
_KAPPA = _f32(0.044715)


def _activation(fn, x):
    """torch's formulas, operation for operation (torch.nn.functional's gelu, gelu(approximate='tanh'),
    silu, softplus with beta 1 and threshold 20), of the library functions tanh, erf, exp and log1p."""
    if x.dtype != ir.F32:
        raise TypeError(f"takes an f32, found {x.dtype}")
    one, half = ir.c(1.0), ir.c(0.5)
    if fn == "gelu":          # x * 0.5 * (1 + erf(x * M_SQRT1_2))
        return op("mul", op("mul", x, half), op("add", one, op("erf", op("mul", x, _SQRT1_2))))
    if fn == "gelu_tanh":     # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * x * x)))
        cube = op("mul", op("mul", x, x), x)
        inner = op("mul", _SQRT_2_PI, op("add", x, op("mul", _KAPPA, cube)))
        # below about -5.5 tanh is -1, so 1 + tanh is +0.0 and the result -0.0, as torch's
        return op("mul", op("mul", half, x), op("add", one, op("tanh", inner)))
    if fn == "silu":          # x / (1 + exp(-x))
        return op("div", x, op("add", one, op("exp", op("neg", x))))
    # softplus: x past the threshold 20, else log1p(exp(x)) (NaN fails the test, so it gives NaN)
    return op("select", op("gt", x, ir.c(20.0)), x, op("log1p", op("exp", x)))


define(("gelu", "gelu_tanh", "silu", "softplus"), 1, _activation, _activation.__doc__)
define(("fma",), 3, lambda fn, x, y, z: op("fma", x, y, z),
       "x * y + z rounded once (CUDA); on the C target in float64, rounded once to float32 (printers.py).")


def _convert(fn, x):
    """to_f32: integers rounded to nearest even; to_i32, to_i64: integers wrapped, floats truncated toward
    zero, saturating at the ends of the range, NaN to 0 (every target agrees on every input)."""
    dst = {"to_f32": ir.F32, "to_i32": ir.I32, "to_i64": ir.I64}[fn]
    if x.dtype not in (ir.F32, *INTS):
        raise TypeError(f"converts numbers, found {x.dtype}")
    if x.dtype == dst:
        return x
    if dst == ir.F32 or x.dtype in INTS:
        return op(fn, x)
    top = 2.0 ** (_WIDTH[dst] - 1)
    lo, hi = ir.Const(-int(top), dst), ir.Const(int(top) - 1, dst)
    inside = op("select", op("lt", x, ir.c(-top)), lo, op(fn, x))
    return op("select", op("isnan", x), ir.Const(0, dst), op("select", op("ge", x, ir.c(top)), hi, inside))


define(("to_f32", "to_i32", "to_i64"), 1, _convert, _convert.__doc__)


def _bits(fn, x):
    """bits(x): a float32's bit pattern as an i32 (the sign bit is the i32's sign); from_bits(n): the
    float32 whose bit pattern is the i32 n. Reinterpretations, exact for every value (NaN payloads too)."""
    if fn == "bits":
        if x.dtype != ir.F32:
            raise TypeError(f"takes a float32, found {x.dtype}")
        return op("u32_to_i32", op("bits", x))
    if x.dtype != I32:
        raise TypeError(f"takes an i32, found {x.dtype}")
    return op("from_bits", op("i32_to_u32", x))


define(("bits", "from_bits"), 1, _bits, _bits.__doc__)


@function("reverse_bits", arity=2)
class ReverseBits(Function):
    """reverse_bits(x, n): the low n bits of integer x in reverse order (bit i to bit n - 1 - i), the bits
    above them dropped; n an integer literal, a power of two up to x's width. A swap network: halves,
    then quarters, ... (log2 n steps of masks and shifts)."""

    def build(self, b, idx, node, axes):
        x, width = b.elementwise(idx, node.args[0], axes), node.args[1]
        if x.dtype not in INTS:
            b.fail(idx, f"reverse_bits takes an integer, found {x.dtype}", node)
        n = width.value if isinstance(width, E.Num) and isinstance(width.value, int) else 0
        if n < 2 or n & (n - 1) or n > _WIDTH[x.dtype]:
            b.fail(idx, f"reverse_bits(x, n): n must be a power-of-two integer literal up to {_WIDTH[x.dtype]}",
                   width)
        k = lambda v: ir.Const(v, x.dtype)  # noqa: E731
        x = op("bitand", x, k((1 << n) - 1 if n < _WIDTH[x.dtype] else -1))
        step = n // 2
        while step:
            mask = sum(((1 << step) - 1) << (2 * step * i) for i in range(n // (2 * step)))
            mask = mask - (1 << _WIDTH[x.dtype]) if mask >> (_WIDTH[x.dtype] - 1) else mask   # as a signed literal
            # the shifted-down half is masked after the shift, so an arithmetic shift brings in nothing
            x = op("bitor", op("bitand", op("shr", x, k(step)), k(mask)), op("shl", op("bitand", x, k(mask)), k(step)))
            step //= 2
        return x


@function("iota")
class Iota(Function):
    """iota(a): the index along axis `a` (i32, varying over `a` alone; inside a row block, the index of
    the row in the block for its inner axis, and the block's index for the first axis)."""

    def build(self, b, idx, node, axes):
        axis = b.axis_arg(idx, node.args[0])
        axes.add(axis)
        return ir.Var(f"#{axis}", I32)


@stage("broadcast", args=("node", "axis*"))
class Broadcast(Stage):
    """broadcast(v, a, ...): v, which does not vary over the axes a, ..., as a value that does (the same
    element at every index of them): to store it to an output over those axes, or reduce it over them."""

    def build(self, b, call, node, *new):
        idx = call.index
        axes = set()
        raw = isinstance(node, E.Name) and node.id in b.values and b.values[node.id].dtype == RAW
        # copied elements are broadcast as they are (a row stored to several places), never computed with
        e = ir.Var(node.id, RAW) if raw else ir.fold(b.elementwise(idx, node, axes))
        axes = set(b.values[node.id].axes) if raw else b.axes_of(e)
        for i, a in enumerate(new):
            if a in axes or a in new[:i]:
                b.fail(idx, f"broadcast: the value varies over axis {a!r} already", call.args[i + 1])
        b.add(idx, Map(b.define(idx, call.targets[0], axes | set(new), e.dtype), e))
