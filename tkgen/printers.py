"""Print primitive IR as TileLang (inside a prim_func) or as PyTorch (on whole tensors).

The same tree prints both ways, so a kernel and its reference do the same float32 operations in the same
order. In PyTorch, unsigned 32-bit integers live in int64 tensors and are wrapped after every operation
that can leave the range.
"""
from __future__ import annotations

from typing import Callable

from . import ir
from .ir import BOOL, F32, I32, U32

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "shl": "<<", "shr": ">>", "bitand": "&", "bitor": "|", "bitxor": "^",
          "and": "&", "or": "|"}


def _float_literal(v: float) -> str:
    if v != v:
        return "float('nan')"
    if v in (float("inf"), float("-inf")):
        return "float('inf')" if v > 0 else "-float('inf')"
    return repr(float(v))


def _c_exact(v: float) -> bool:
    """Whether a float32 constant survives TVM's C code generator, which prints 7 significant digits."""
    import struct
    if v != v or v in (float("inf"), float("-inf")):
        return True
    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]  # noqa: E731
    return f32(float(f"{v:.6e}")) == f32(v)


class TileLangPrinter:
    """PrimExpr source for tilelang.language as T. `var` maps an IR Var to its source (a tile element)."""

    def __init__(self, var: Callable[[ir.Var], str] = lambda v: v.name):
        self.var = var

    def __call__(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Const):
            if e.dtype == F32:
                if not _c_exact(e.value):     # the bit pattern, or the C source would round the constant
                    import struct
                    bits = struct.unpack("<I", struct.pack("<f", e.value))[0]
                    return f'T.reinterpret(T.uint32({hex(bits)}), "float32")'
                return f"T.float32({_float_literal(e.value)})"
            if e.dtype == U32:
                return f"T.uint32({hex(e.value) if e.value > 255 else e.value})"
            if e.dtype == I32:
                return f"T.int32({e.value})"
            return "True" if e.value else "False"
        if isinstance(e, ir.Var):
            return self.var(e)
        if isinstance(e, ir.Call):
            return f"{e.fn}({', '.join(self(a) for a in e.args)})"
        a = [self(x) for x in e.args]
        o = e.op
        if o in _INFIX:
            return f"({a[0]} {_INFIX[o]} {a[1]})"
        if o in ("max", "min"):
            return f"T.{o}({a[0]}, {a[1]})"
        if o == "neg":
            return f"(-{a[0]})"
        if o == "not":
            return f"T.Not({a[0]})"
        if o == "isnan":
            return f"T.isnan({a[0]})"
        if o == "select":
            return f"T.Select({a[0]}, {a[1]}, {a[2]})"
        if o in ("exp", "log", "sqrt", "rsqrt"):
            return f"T.{o}({a[0]})"
        if o == "bits":
            return f'T.reinterpret({a[0]}, "uint32")'
        if o == "from_bits":
            return f'T.reinterpret({a[0]}, "float32")'
        if o == "u32_to_i32":
            return f'T.reinterpret({a[0]}, "int32")'
        if o == "i32_to_u32":
            return f'T.reinterpret({a[0]}, "uint32")'
        if o in ("to_f32", "to_i32", "to_u32"):
            return f'T.cast({a[0]}, "{ {"to_f32": "float32", "to_i32": "int32", "to_u32": "uint32"}[o]}")'
        raise KeyError(o)


class TorchPrinter:
    """Tensor-expression source for PyTorch. u32 values are int64 tensors in [0, 2^32)."""

    def __init__(self, var: Callable[[ir.Var], str] = lambda v: v.name):
        self.var = var

    def __call__(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Const):
            if e.dtype == F32:
                return f"_f32({_float_literal(e.value)})"
            if e.dtype == BOOL:
                return "True" if e.value else "False"
            return hex(e.value) if e.value > 255 else str(e.value)
        if isinstance(e, ir.Var):
            return self.var(e)
        if isinstance(e, ir.Call):
            return f"{e.fn}({', '.join(self(a) for a in e.args)})"
        a = [self(x) for x in e.args]
        o, dt = e.op, e.dtype
        if o in ("add", "sub", "mul", "shl") and dt == U32:
            return f"(({a[0]} {_INFIX[o]} {a[1]}) & 0xFFFFFFFF)"
        if o in ("add", "sub", "mul", "shl") and dt == I32:
            return f"_wrap_i32({a[0]} {_INFIX[o]} {a[1]})"
        if o in _INFIX:
            return f"({a[0]} {_INFIX[o]} {a[1]})"
        if o in ("max", "min"):
            return f"torch.{'maximum' if o == 'max' else 'minimum'}(_t({a[0]}), _t({a[1]}))"
        if o == "neg":
            return f"(-{a[0]})"
        if o == "not":
            return f"(~{a[0]})"
        if o == "isnan":
            return f"torch.isnan({a[0]})"
        if o == "select":
            return f"torch.where({a[0]}, {a[1]}, {a[2]})"
        if o in ("exp", "log", "rsqrt"):
            return f"_{o}({a[0]})"          # mirrors the target's math library (torch_prims)
        if o == "sqrt":
            return f"torch.sqrt({a[0]})"
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
        if o in ("to_i32", "to_u32"):
            return f"_t({a[0]}).to(torch.int64)"
        raise KeyError(o)


def function_lines(fn: ir.Function, printer) -> list:
    """The body of a generated helper: one line per let-binding, then the result."""
    lines = [f"{name} = {printer(e)}" for name, e in fn.lets]
    lines.append(f"return {printer(fn.result)}")
    return lines
