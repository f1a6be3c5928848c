"""Print primitive IR as TileLang (inside a prim_func) or as PyTorch (on whole tensors).

The same tree prints both ways, so a kernel and its reference do the same float32 operations in the same
order. Memory nodes (axis indices, tile reads, tensor fetches, sizes, scalars, codecs) are printed by the
context a printer is given: the kernel printer knows tiles and loops, the reference printer whole tensors.

TVM's simplifier rewrites some float expressions in ways IEEE arithmetic does not allow: `x + 0.0` to `x`
(wrong for -0.0), `x * 0.0` to `0.0` (wrong for NaN, infinities and negative x), `x - x` and `(x + y) - y`
to `0.0` and `x` (wrong for infinities and NaN), `x == x` to true. The TileLang printer therefore prints
float zeros that are operands of arithmetic as an opaque bit pattern, cancelling differences through IEEE
intrinsics, and a self-comparison as the NaN test it means, so the kernel computes what the tree says. In
PyTorch, unsigned 32-bit integers live in int64 tensors and are wrapped after every operation that can
leave the range; signed 32-bit values likewise.
"""
from __future__ import annotations

from ..ir import prim as ir
from ..ir.prim import BOOL, F32, F64, I32, I64, U32

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "shl": "<<", "shr": ">>", "bitand": "&", "bitor": "|", "bitxor": "^",
          "and": "&", "or": "|"}
_TL_DTYPE = {F32: "float32", F64: "float64", I32: "int32", I64: "int64", U32: "uint32", BOOL: "bool"}
_ARITH_FLOAT = {"add", "sub", "mul", "div"}


def _float_literal(v: float) -> str:
    if v != v:
        return "float('nan')"
    if v in (float("inf"), float("-inf")):
        return "float('inf')" if v > 0 else "-float('inf')"
    return repr(float(v))


def _c_exact(v: float) -> bool:
    """Whether a float32 constant survives TVM's C code generator, which prints 7 significant digits."""
    if v != v or v in (float("inf"), float("-inf")):
        return True
    return ir.f32_bits(float(f"{v:.6e}")) == ir.f32_bits(v)


def tl_dtype(dtype: str) -> str:
    return _TL_DTYPE[dtype]


class _NoMemory:
    """Context of helper functions (codecs): only their own variables."""

    def __getattr__(self, name):
        def fail(node, *args):
            raise TypeError(f"{type(node).__name__} outside a kernel or reference context")
        return fail


class TileLangPrinter:
    """PrimExpr source for tilelang.language as T. `ctx` prints the memory nodes (see the module doc)."""

    def __init__(self, ctx=None):
        self.ctx = ctx or _NoMemory()
        self.bindings = None       # a statement's bound subtrees (tkgen/ir/sharing.py), printed by name

    def const(self, e: ir.Const, opaque=False) -> str:
        if e.dtype == F32:
            if opaque or not _c_exact(e.value):
                # the bit pattern: the C source would round the constant, or TVM would fold the operation
                return f'T.reinterpret(T.uint32({hex(ir.f32_bits(e.value))}), "float32")'
            return f"T.float32({_float_literal(e.value)})"
        if e.dtype == U32:
            return f"T.uint32({hex(e.value) if e.value > 255 else e.value})"
        if e.dtype == I32:
            return f"T.int32({e.value})"
        if e.dtype == I64:
            return f"T.int64({e.value})"
        if e.dtype == F64:
            return f"T.float64({_float_literal(e.value)})"
        return "True" if e.value else "False"

    def __call__(self, e: ir.Expr, named=True) -> str:
        if named and self.bindings is not None:
            name = self.bindings.name_of(e)
            if name is not None:
                return name
        if isinstance(e, ir.Const):
            return self.const(e)
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Call):
            return f"{e.fn}({', '.join(self(a) for a in e.args)})"
        if isinstance(e, ir.Choose):
            return _choose(self, e)
        if not isinstance(e, ir.Op):
            return self.ctx.node(e, self)
        return self.op(e)

    def operand(self, e: ir.Expr, parent: ir.Op) -> str:
        if isinstance(e, ir.Const) and e.dtype == F32 and e.value == 0.0 and parent.op in _ARITH_FLOAT:
            return self.const(e, opaque=True)
        return self(e)

    def op(self, e: ir.Op) -> str:
        o = e.op
        a = [self.operand(x, e) for x in e.args]
        if o in ("add", "sub") and e.dtype == F32 and _cancels(e):
            return f'T.ieee_{o}({a[0]}, {a[1]}, "rn")'
        if o in ("eq", "ne") and e.args[0].dtype == F32 and e.args[0] == e.args[1]:
            return f"T.Not(T.isnan({a[0]}))" if o == "eq" else f"T.isnan({a[0]})"
        if o in _INFIX:
            return f"({a[0]} {_INFIX[o]} {a[1]})"
        if o in ("max", "min"):
            return f"T.{o}({a[0]}, {a[1]})"
        if o == "floordiv":
            return f"T.floordiv({a[0]}, {a[1]})"
        if o == "floormod":
            return f"T.floormod({a[0]}, {a[1]})"
        if o == "neg":
            return f"(-{a[0]})"
        if o == "not":
            return f"T.Not({a[0]})"
        if o == "isnan":
            return f"T.isnan({a[0]})"
        if o == "select":
            return f"T.Select({a[0]}, {a[1]}, {a[2]})"
        if o == "fma":
            if getattr(getattr(self.ctx, "arch", None), "backend", None) == "cpu":
                # TileLang's C backend has no fused multiply-add: the product is exact in float64 and the
                # sum is rounded to float64, then once to float32 (the reference does the same on the CPU)
                return 'T.cast(T.cast({}, "float64") * T.cast({}, "float64") + T.cast({}, "float64"), "float32")' \
                    .format(*a)
            return f"T.fma({a[0]}, {a[1]}, {a[2]})"
        if o in ("exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "erf"):
            return f"T.{o}({a[0]})"
        if o == "bits":
            return f'T.reinterpret({a[0]}, "uint32")'
        if o == "from_bits":
            return f'T.reinterpret({a[0]}, "float32")'
        # u32 -> i32 reinterprets: TVM's bound analysis takes a cast for a value-preserving conversion (a u32
        # cast to i32 "is never negative"). i32 -> u32 casts: its operands are never negative (shift amounts,
        # biased exponents), and TVM's C backend cannot reinterpret an operand it has folded to a constant
        if o == "u32_to_i32":
            return f'T.reinterpret({a[0]}, "int32")'
        if o == "i32_to_u32":
            return f'T.cast({a[0]}, "uint32")'
        if o.startswith("to_"):
            return f'T.cast({a[0]}, "{tl_dtype(e.dtype)}")'
        raise KeyError(o)


def _cancels(e: ir.Op) -> bool:
    """Whether TVM would cancel this float add or sub: x - x, (x + y) - y, (x + y) - x."""
    a, b = e.args
    if e.op == "sub" and a == b:
        return True
    return e.op == "sub" and isinstance(a, ir.Op) and a.op == "add" and b in a.args


def _choose(printer, e: ir.Choose) -> str:
    """A conditional on a structural param, resolved when the factory (or reference) specializes."""
    out = printer(e.cases[-1][1])
    for value, sub in reversed(e.cases[:-1]):
        out = f"({printer(sub)} if {e.param} == {value!r} else {out})"
    return out


class TorchPrinter:
    """Tensor-expression source for PyTorch. u32 and i32 values are int64 tensors (wrapped to their range)."""

    def __init__(self, ctx=None):
        self.ctx = ctx or _NoMemory()

    def __call__(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Const):
            if e.dtype in (F32, F64):
                return f"_f32({_float_literal(e.value)})" if e.dtype == F32 else f"_f64({_float_literal(e.value)})"
            if e.dtype == BOOL:
                return "True" if e.value else "False"
            return hex(e.value) if e.value > 255 else str(e.value)
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Call):
            return f"{e.fn}({', '.join(self(a) for a in e.args)})"
        if isinstance(e, ir.Choose):
            return _choose(self, e)
        if not isinstance(e, ir.Op):
            return self.ctx.node(e, self)
        a = [self(x) for x in e.args]
        o, dt = e.op, e.dtype
        if o in ("add", "sub", "mul", "shl") and dt == U32:
            return f"(({a[0]} {_INFIX[o]} {a[1]}) & 0xFFFFFFFF)"
        if o in ("add", "sub", "mul", "shl") and dt == I32:
            return f"_wrap_i32({a[0]} {_INFIX[o]} {a[1]})"
        if o == "floordiv":
            return f"torch.div(_t({a[0]}), _t({a[1]}), rounding_mode='floor')"
        if o == "floormod":
            return f"torch.remainder(_t({a[0]}), _t({a[1]}))"
        if o in _INFIX:
            return f"({a[0]} {_INFIX[o]} {a[1]})"
        if o in ("max", "min"):
            return f"torch.{'maximum' if o == 'max' else 'minimum'}(_t({a[0]}), _t({a[1]}))"
        if o == "neg":
            return f"_wrap_i32(-{a[0]})" if dt == I32 else f"(-{a[0]})"
        if o == "not":
            return f"(~{a[0]})"
        if o == "isnan":
            return f"torch.isnan({a[0]})"
        if o == "select":
            if _python_value(e.args[0]):      # a condition on params and sizes: a Python bool
                return f"({a[1]} if {a[0]} else {a[2]})"
            return f"torch.where({a[0]}, {a[1]}, {a[2]})"
        if o == "fma":
            return f"_fma({a[0]}, {a[1]}, {a[2]})"
        if o in ("exp", "log", "log1p", "rsqrt", "sqrt", "tanh", "erf"):
            return f"_{o}({a[0]})"          # mirrors the target's math library (torch_prims)
        if o == "bits":
            return f"_bits({a[0]})"
        if o == "from_bits":
            return f"_from_bits({a[0]})"
        if o == "u32_to_i32":
            return f"_wrap_i32({a[0]})"
        if o == "i32_to_u32":
            return f"({a[0]} & 0xFFFFFFFF)"
        if o == "to_f32":
            return f"_t({a[0]}).to(torch.float32)"
        if o == "to_f64":
            return f"_t({a[0]}).to(torch.float64)"
        if o == "to_i32":
            return f"_wrap_i32(_trunc({a[0]}))"
        if o == "to_u32":
            return f"(_trunc({a[0]}) & 0xFFFFFFFF)"
        if o == "to_i64":
            return f"_trunc({a[0]})"
        raise KeyError(o)


def function_lines(fn: ir.Function, printer) -> list:
    """The body of a generated helper: one line per let-binding, then the result."""
    lines = [f"{name} = {printer(e)}" for name, e in fn.lets]
    lines.append(f"return {printer(fn.result)}")
    return lines


def _python_value(e) -> bool:
    """Whether an expression is of constants, sizes and params alone (a Python number in the reference)."""
    if isinstance(e, (ir.Scalar, ir.Const, ir.Size)):
        return True
    return isinstance(e, ir.Op) and all(_python_value(a) for a in e.args)
