"""The primitive expression IR that stages, number formats and the kernel IR are built from.

A small, typed set of scalar operations: float32 arithmetic, 32- and 64-bit integer arithmetic, bit casts,
selects, and the few nodes that name memory and sizes (an axis index, a tile element, a stored element of a
tensor, a size, a scalar param). Both printers, TileLang and PyTorch, know exactly these nodes and nothing
else, so a kernel and its reference are two prints of the same tree.

Nodes that name memory:
- `Index(axis)`: the index of an axis, global (in the tensor) or local (inside the tile of one block);
- `Read(buffer)`: an element of a tile buffer, at the current indices of its axes or at explicit ones;
- `Fetch(tensor, indices, guard)`: a stored element of a tensor (raw storage), 0 where `guard` is false;
- `Decode`, `Encode`: a stored element to its value and back, by an element format (the printer and the
  architecture decide between a native conversion and the generated software codec);
- `Size(name)`: an integer size known to the factory or the reference (an axis extent, a dim);
- `Scalar(name)`: a param or static dim used as a value.
`Choose(param, cases)` picks an expression by the value of a structural param, inside one factory.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Optional, Tuple, Union

F32, F64, U32, I32, I64, BOOL = "f32", "f64", "u32", "i32", "i64", "bool"
RAW = "raw"            # a stored element (container dtype), moved or decoded, never computed with
DTYPES = (F32, F64, U32, I32, I64, BOOL)
INTS = (U32, I32, I64)
FLOATS = (F32, F64)


@dataclass(frozen=True)
class Const:
    value: Union[int, float, bool]
    dtype: str


@dataclass(frozen=True)
class Var:
    """A named value: a codec's argument, a let-bound temporary, or a loop variable."""

    name: str
    dtype: str


@dataclass(frozen=True)
class Op:
    op: str
    args: Tuple["Expr", ...]
    dtype: str


@dataclass(frozen=True)
class Call:
    """A call of a generated helper function (a format codec, the top-k order key) by name."""

    fn: str
    args: Tuple["Expr", ...]
    dtype: str


@dataclass(frozen=True)
class Index:
    """The index of `axis`: global (its position in the tensors) or local (inside one block's tile)."""

    axis: str
    local: bool = False
    dtype: str = I32


@dataclass(frozen=True)
class Size:
    """An integer size: an axis's extent (`extent(axis)`) or tile (`block(axis)`), dims, runtime numels of
    flat tensors (`n_<tensor>`)."""

    name: str
    dtype: str = I32


# The sizes and loop variables an axis brings, spelled here only: every module that names one calls these.
def extent_name(axis: str) -> str:
    """The axis's extent (`N_<axis>`): a dim, a product of dims, or the packets of a packed axis."""
    return f"N_{axis}"


def block_name(axis: str) -> str:
    """Elements of the axis one tile holds (`B_<axis>`): its block, or one chunk of a streamed axis."""
    return f"B_{axis}"


def tile_var(axis: str) -> str:
    """The index of a tile along the axis (`b_<axis>`): a block of the grid, a chunk of a streamed loop."""
    return f"b_{axis}"


def lane_var(axis: str) -> str:
    """The index of an element inside its tile along the axis (`i_<axis>`), in a parallel loop."""
    return f"i_{axis}"


def is_axis_size(name: str) -> bool:
    """Whether `name` is an extent or a block of some axis (rather than a dim, a param or a knob)."""
    return name.startswith(("N_", "B_"))


def extent(axis: str) -> Size:
    return Size(extent_name(axis))


def block(axis: str) -> Size:
    return Size(block_name(axis))


@dataclass(frozen=True)
class Scalar:
    """A numeric param or a static dim used as a compute value (float32 unless integer arithmetic)."""

    name: str
    dtype: str = F32


@dataclass(frozen=True)
class Read:
    """An element of a tile buffer: at the statement's indices of the buffer's axes (indices None), or at
    explicit local indices, one per axis of the buffer; where `guard` is false it is not read and the
    result is 0."""

    buffer: str
    dtype: str
    indices: Optional[Tuple["Expr", ...]] = None
    guard: Optional["Expr"] = None


@dataclass(frozen=True)
class Fetch:
    """A stored element of `tensor` at global `indices` (one per storage dim), as it is stored. Where
    `guard` is false the element is not read and the result is the storage's zero.

    `view`: when the indices are the tensor's view (each storage dim a mixed-radix index of a group of
    axes, or a fixed index), those groups: whole-tensor printers read the tensor as a reshape, not a
    gather. Rows of a partial row block lie past the tensor's end: they read as zero."""

    tensor: str
    indices: Tuple["Expr", ...]
    guard: Optional["Expr"] = None
    dtype: str = RAW
    view: Optional[Tuple[Tuple[object, ...], ...]] = None


@dataclass(frozen=True)
class Decode:
    """The value of a stored element of element type `elem`: a format name, an integer dtype
    ("int32", "int64", "uint8", ...: integers widened, words as their zero-extended u32 bits), or `@x`,
    the dtype input `x` has at the call. `arg` is a RAW element, or the u32 code of a packed format."""

    elem: str
    arg: "Expr"
    dtype: str


@dataclass(frozen=True)
class Encode:
    """A value stored as element type `elem` (see Decode): RAW, or the u32 code of a packed format."""

    elem: str
    arg: "Expr"
    dtype: str = RAW


@dataclass(frozen=True)
class Choose:
    """`cases[i][1]` where structural param `param` has the value `cases[i][0]` (variants merged into one
    factory): printed as a conditional the factory resolves when it specializes."""

    param: str
    cases: Tuple[Tuple[object, "Expr"], ...]

    @property
    def dtype(self):
        return self.cases[0][1].dtype


Expr = Union[Const, Var, Op, Call, Index, Size, Scalar, Read, Fetch, Decode, Encode, Choose]

# op name -> kind
ARITH = {"add", "sub", "mul", "div", "max", "min"}
INT_ARITH = {"floordiv", "floormod", "shl", "shr", "bitand", "bitor", "bitxor"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
PREDICATES = {"isnan"}
LOGIC = {"and", "or", "not"}
MATH = {"exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "erf", "neg"}
CASTS = {"bits", "from_bits", "to_f32", "to_f64", "to_i32", "to_u32", "to_i64", "u32_to_i32", "i32_to_u32"}
ALL_OPS = ARITH | INT_ARITH | COMPARE | PREDICATES | LOGIC | MATH | CASTS | {"select", "fma"}
_CAST_DST = {"to_f32": F32, "to_f64": F64, "to_i32": I32, "to_u32": U32, "to_i64": I64}


def c(value, dtype=F32) -> Const:
    return Const(float(value) if dtype in FLOATS else bool(value) if dtype == BOOL else int(value), dtype)


def u32(value) -> Const:
    return Const(int(value) & 0xFFFFFFFF, U32)


def i32(value) -> Const:
    return Const(int(value), I32)


def _same(args, what):
    dts = {a.dtype for a in args}
    if len(dts) != 1:
        raise TypeError(f"{what}: operands must have one dtype, got {sorted(dts)}")
    return dts.pop()


def op(name: str, *args: Expr) -> Op:
    """Build a typed primitive operation; raises TypeError on a dtype mismatch."""
    if name in ARITH:
        dt = _same(args, name)
        if dt in (BOOL, RAW):
            raise TypeError(f"{name}: operands must be numbers, got {dt}")
        return Op(name, args, dt)
    if name in INT_ARITH:
        dt = _same(args, name)
        if dt not in INTS:
            raise TypeError(f"{name}: operands must be integers, got {dt}")
        return Op(name, args, dt)
    if name in COMPARE:
        if _same(args, name) == RAW:
            raise TypeError(f"{name}: stored elements are not compared")
        return Op(name, args, BOOL)
    if name in PREDICATES:
        if args[0].dtype != F32:
            raise TypeError(f"{name}: operand must be f32")
        return Op(name, args, BOOL)
    if name in LOGIC:
        if any(a.dtype != BOOL for a in args):
            raise TypeError(f"{name}: operands must be boolean")
        return Op(name, args, BOOL)
    if name in MATH:
        if name == "neg":
            if args[0].dtype in (BOOL, RAW, U32):
                raise TypeError(f"neg: operand must be a signed number, got {args[0].dtype}")
        elif args[0].dtype != F32:
            raise TypeError(f"{name}: operand must be f32")
        return Op(name, args, args[0].dtype)
    if name == "fma":
        if _same(args, "fma") != F32:
            raise TypeError("fma: operands must be f32")
        return Op(name, args, F32)
    if name == "select":
        cond, a, b = args
        if cond.dtype != BOOL:
            raise TypeError("select: condition must be boolean")
        return Op(name, args, _same((a, b), "select"))
    fixed = {"bits": (F32, U32), "from_bits": (U32, F32), "u32_to_i32": (U32, I32), "i32_to_u32": (I32, U32)}
    if name in fixed:
        src, dst = fixed[name]
        if args[0].dtype != src:
            raise TypeError(f"{name}: operand must be {src}, got {args[0].dtype}")
        return Op(name, args, dst)
    if name in _CAST_DST:
        if args[0].dtype in (BOOL, RAW):
            raise TypeError(f"{name}: operand must be a number, got {args[0].dtype}")
        return Op(name, args, _CAST_DST[name])
    raise KeyError(f"unknown primitive {name!r}")


def f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


_INF = float("inf")
_COMPARE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
            "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def _is(e: Expr, value) -> bool:
    return isinstance(e, Const) and e.value == value and (e.dtype == BOOL) == isinstance(value, bool)


def _is_bits(e: Expr, value: float) -> bool:
    """Whether `e` is the float32 constant `value`, sign of zero included."""
    return isinstance(e, Const) and e.dtype == F32 and not math.isnan(e.value) and \
        f32_bits(e.value) == f32_bits(value)


def fold(e: Expr) -> Expr:
    """Simplify identities that hold for every float32 (NaN, infinities and the sign of zero included),
    bottom up, and nothing else, so that the operations left are exactly those written:

    - -(constant); x * 1 and x / 1 are x; x + (-0.0) and x - (+0.0) are x (never x + 0.0: -0.0 + 0.0 is
      +0.0);
    - comparisons no float passes (x > +inf, x < -inf) or of two constants; min(x, +inf) and max(x, -inf)
      are x (fminf(NaN, inf) would be inf, but kernel and reference both print the folded tree);
    - isnan of a constant; a float constant converted to an integer that holds it (`to_i32(1)`);
    - logic and selects on constant conditions.

    (What an absent optional input or param leaves behind: a weight of 1, an addend of -0.0, a clamp of
    +inf.)"""
    if isinstance(e, Choose):
        return Choose(e.param, tuple((k, fold(v)) for k, v in e.cases))
    if not isinstance(e, Op):
        return rebuild(e, lambda n: fold(n) if isinstance(n, Op) and n is not e else None) \
            if isinstance(e, (Read, Fetch, Decode, Encode, Call)) else e
    args = tuple(fold(a) for a in e.args)
    o = e.op
    if o == "neg" and isinstance(args[0], Const) and args[0].dtype in FLOATS:
        return Const(-args[0].value, args[0].dtype)
    if e.dtype == F32:
        if o == "mul" and _is_bits(args[1], 1.0):
            return args[0]
        if o == "mul" and _is_bits(args[0], 1.0):
            return args[1]
        if o == "div" and _is_bits(args[1], 1.0):
            return args[0]
        if o == "add" and _is_bits(args[1], -0.0):
            return args[0]
        if o == "add" and _is_bits(args[0], -0.0):
            return args[1]
        if o == "sub" and _is_bits(args[1], 0.0):
            return args[0]
    if e.dtype in INTS:
        folded = _fold_int(o, args, e.dtype)
        if folded is not None:
            return folded
    if o == "isnan" and isinstance(args[0], Const):
        return Const(math.isnan(args[0].value), BOOL)
    if o == "gt" and (_is(args[1], _INF) or _is(args[0], -_INF)):
        return Const(False, BOOL)
    if o == "lt" and (_is(args[1], -_INF) or _is(args[0], _INF)):
        return Const(False, BOOL)
    if o in ("min", "max"):
        neutral = _INF if o == "min" else -_INF
        if _is(args[1], neutral):
            return args[0]
        if _is(args[0], neutral):
            return args[1]
    if o in ("and", "or"):
        absorbing = o == "or"          # True absorbs `or`, False absorbs `and`; the other one is neutral
        for a, b in ((args[0], args[1]), (args[1], args[0])):
            if _is(a, absorbing):
                return Const(absorbing, BOOL)
            if _is(a, not absorbing):
                return b
    if o == "not" and isinstance(args[0], Const):
        return Const(not args[0].value, BOOL)
    if o in COMPARE and all(isinstance(a, Const) for a in args):    # `0 >= 0` of an absent int input
        return Const(bool(_COMPARE[o](args[0].value, args[1].value)), BOOL)
    if o == "select" and isinstance(args[0], Const):
        return args[1] if args[0].value else args[2]
    return Op(o, args, e.dtype)


_INT_EVAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
             "floordiv": lambda a, b: a // b if b else None, "floormod": lambda a, b: a % b if b else None,
             "min": min, "max": max, "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b,
             "bitxor": lambda a, b: a ^ b}
_BITS = {I32: 32, U32: 32, I64: 64}


def _wrap(v: int, dtype: str) -> int:
    bits = _BITS[dtype]
    v &= (1 << bits) - 1
    return v - (1 << bits) if dtype != U32 and v >> (bits - 1) else v


def _fold_int(o, args, dtype):
    """Integer arithmetic on constants, and the identities x + 0, x - 0, x * 1, x * 0, x // 1 (exact for
    integers), so that index arithmetic prints short."""
    if all(isinstance(a, Const) for a in args):
        if o in _INT_EVAL and len(args) == 2:
            v = _INT_EVAL[o](args[0].value, args[1].value)
            return None if v is None else Const(_wrap(v, dtype), dtype)
        if o in ("shl", "shr") and 0 <= args[1].value < _BITS[dtype]:
            v = args[0].value << args[1].value if o == "shl" else args[0].value >> args[1].value
            return Const(_wrap(v, dtype), dtype)
        if o in ("i32_to_u32", "u32_to_i32", "to_i64", "to_i32", "to_u32") and args[0].dtype in INTS:
            return Const(_wrap(args[0].value, dtype), dtype)
        if o in ("to_i64", "to_i32", "to_u32") and args[0].dtype in FLOATS and math.isfinite(args[0].value):
            # a float constant that the integer holds after truncation: every target converts it the same
            v = math.trunc(args[0].value)
            low, high = (0, 2 ** 32) if dtype == U32 else (-2 ** (_BITS[dtype] - 1), 2 ** (_BITS[dtype] - 1))
            return Const(v, dtype) if low <= v < high else None
        return None
    if o in ("add", "bitor", "bitxor", "shl", "shr") and _is(args[-1], 0):
        return args[0]
    if o in ("add", "bitor", "bitxor") and _is(args[0], 0):
        return args[1]
    if o == "sub" and _is(args[1], 0):
        return args[0]
    if o == "mul" and (_is(args[0], 0) or _is(args[1], 0)):
        return Const(0, dtype)
    if o == "mul" and _is(args[1], 1):
        return args[0]
    if o == "mul" and _is(args[0], 1):
        return args[1]
    if o == "floordiv" and _is(args[1], 1):
        return args[0]
    if o == "floormod" and _is(args[1], 1):
        return Const(0, dtype)
    return None


def children(e: Expr):
    if isinstance(e, (Op, Call)):
        return e.args
    if isinstance(e, Read):
        return (e.indices or ()) + ((e.guard,) if e.guard is not None else ())
    if isinstance(e, Fetch):
        return e.indices + ((e.guard,) if e.guard is not None else ())
    if isinstance(e, (Decode, Encode)):
        return (e.arg,)
    if isinstance(e, Choose):
        return tuple(v for _, v in e.cases)
    return ()


def walk(e: Expr):
    """Every node of the tree, parents first, children left to right (a stack, not nested generators:
    those cost each node the depth of its tree, and the verifier walks every expression after every pass)."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        c = children(n)
        if c:
            stack.extend(reversed(c))


def var_names(e: Expr) -> set:
    """The names of every Var in the expression."""
    return {n.name for n in walk(e) if isinstance(n, Var)}


def call_names(e: Expr) -> set:
    """The names of every helper the expression calls."""
    return {n.fn for n in walk(e) if isinstance(n, Call)}


def reads(e: Expr) -> set:
    """The tile buffers the expression reads."""
    return {n.buffer for n in walk(e) if isinstance(n, Read)}


def fetches(e: Expr) -> set:
    """The tensors the expression reads."""
    return {n.tensor for n in walk(e) if isinstance(n, Fetch)}


def rebuild(e: Expr, fn) -> Expr:
    """The tree with `fn` applied bottom up: `fn(node with rebuilt children)` returns a replacement or None
    (keep)."""
    if isinstance(e, (Op, Call)):
        e = type(e)(e.op if isinstance(e, Op) else e.fn, tuple(rebuild(a, fn) for a in e.args), e.dtype)
    elif isinstance(e, Read) and (e.indices is not None or e.guard is not None):
        e = Read(e.buffer, e.dtype, None if e.indices is None else tuple(rebuild(a, fn) for a in e.indices),
                 None if e.guard is None else rebuild(e.guard, fn))
    elif isinstance(e, Fetch):
        e = Fetch(e.tensor, tuple(rebuild(a, fn) for a in e.indices),
                  None if e.guard is None else rebuild(e.guard, fn), e.dtype, e.view)
    elif isinstance(e, (Decode, Encode)):
        e = type(e)(e.elem, rebuild(e.arg, fn), e.dtype)
    elif isinstance(e, Choose):
        e = Choose(e.param, tuple((k, rebuild(v, fn)) for k, v in e.cases))
    out = fn(e)
    return e if out is None else out


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace Vars by name."""
    return rebuild(e, lambda n: mapping.get(n.name) if isinstance(n, Var) else None)


def conj(*conds) -> Optional[Expr]:
    """The conjunction of the conditions that are not None (None when there are none)."""
    out = None
    for cnd in conds:
        if cnd is None:
            continue
        out = cnd if out is None else op("and", out, cnd)
    return out


@dataclass(frozen=True)
class Function:
    """A generated helper: straight-line let-bindings and a result (a format encoder or decoder)."""

    name: str
    params: Tuple[Var, ...]
    lets: Tuple[Tuple[str, Expr], ...]
    result: Expr
    doc: str = ""
    # TileLang: a T.macro, so that each let is bound once (a let statement) instead of its expression
    # being repeated at every use; large repeated trees made CUDA lowering of the encoders take minutes.
    # Only for helpers whose argument may be evaluated unconditionally (encoders: their argument is a
    # computed value, and their result is stored under the store's own guard).
    macro: bool = False

    @property
    def dtype(self):
        return self.result.dtype


class Builder:
    """Collects let-bindings while a helper is built, so that shared subexpressions are computed once."""

    def __init__(self):
        self.lets = []

    def let(self, name: str, e: Expr) -> Var:
        self.lets.append((name, e))
        return Var(name, e.dtype)
