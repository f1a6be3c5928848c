"""A readable text form of the kernel IR (`tkgen show OP --passes`, the verifier's messages).

Not a printer of code: one line per statement, loops and nests indented, expressions in a compact
prefix/infix form. `i` is an axis index (`i.t`, local `l.t`), `buf` a tile buffer, `x[...]` a tensor
element, `?g` a guard, `#N_t` a size, `$p` a param.
"""
from __future__ import annotations

from typing import List

from . import kernel as kir
from . import prim as ir

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%", "eq": "==",
          "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&&", "or": "||", "shl": "<<",
          "shr": ">>", "bitand": "&", "bitor": "|", "bitxor": "^"}


def expr(e) -> str:
    """One expression as text."""
    if e is None:
        return "-"
    if isinstance(e, ir.Const):
        return repr(e.value) if e.dtype != ir.F32 else f"{e.value!r}f"
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Op):
        args = [expr(a) for a in e.args]
        if e.op in _INFIX and len(args) == 2:
            return f"({args[0]} {_INFIX[e.op]} {args[1]})"
        return f"{e.op}({', '.join(args)})"
    if isinstance(e, ir.Call):
        return f"{e.fn}({', '.join(expr(a) for a in e.args)})"
    if isinstance(e, ir.Index):
        return f"{'l' if e.local else 'i'}.{e.axis}"
    if isinstance(e, ir.Size):
        return f"#{e.name}"
    if isinstance(e, ir.Scalar):
        return f"${e.name}"
    if isinstance(e, ir.Read):
        at = "" if e.indices is None else f"[{', '.join(expr(i) for i in e.indices)}]"
        return e.buffer + at + ("" if e.guard is None else f"?{expr(e.guard)}")
    if isinstance(e, ir.Fetch):
        return f"{e.tensor}[{', '.join(expr(i) for i in e.indices)}]" + \
            ("" if e.guard is None else f"?{expr(e.guard)}")
    if isinstance(e, ir.Decode):
        return f"decode<{e.elem}>({expr(e.arg)})"
    if isinstance(e, ir.Encode):
        return f"encode<{e.elem}>({expr(e.arg)})"
    if isinstance(e, ir.Choose):
        return f"choose {e.param}{{{', '.join(f'{k!r}: {expr(v)}' for k, v in e.cases)}}}"
    return repr(e)


def buffer(b: kir.Buffer) -> str:
    extra = "" if b.scope == "tile" else f" {b.scope}"
    return f"{b.name}[{', '.join(b.axes)}]:{b.dtype if b.elem is None else b.elem}{extra}"


def stmt(st) -> str:
    """One statement's head line (a loop's or nest's body not included)."""
    if isinstance(st, kir.Compute):
        at = "".join(f" at {a}={expr(e)}" for a, e in st.at)
        return f"{buffer(st.dst)} = {expr(st.value)}{at}"
    if isinstance(st, kir.Store):
        op = "+=" if st.accumulate else "="
        guard = "" if st.guard is None else f" if {expr(st.guard)}"
        return f"store {st.tensor}[{', '.join(expr(i) for i in st.indices)}] {op} {expr(st.value)} " \
               f"over ({', '.join(st.axes)}){guard}"
    if isinstance(st, kir.Reduce):
        return f"{buffer(st.dst)} {'+' if st.accumulate else ''}= {st.kind}({st.src.name}, over {st.axis})"
    if isinstance(st, kir.Fill):
        return f"fill {buffer(st.dst)} = {expr(st.value)}"
    if isinstance(st, kir.Scan):
        return f"{buffer(st.dst)} = {'exclusive ' if st.exclusive else ''}scan({st.src.name}, along {st.axis})"
    if isinstance(st, kir.Gemm):
        return f"{buffer(st.c)} {'+' if st.accumulate else ''}= gemm({st.a.name}, {st.b.name}, over {st.k})"
    if isinstance(st, kir.Copy):
        dims = ", ".join(expr(e) if a is None else f"{expr(e)} + :{a}" for e, a in st.box)
        looped = f" for each ({', '.join(st.looped)})" if st.looped else ""
        looped += f" by {st.instruction}" if st.instruction else ""
        src, dst = f"{st.tensor}[{dims}]", buffer(st.buf)
        return f"copy {dst} -> {src}{looped}" if st.store else f"copy {dst} <- {src}{looped}"
    if isinstance(st, kir.Loop):
        kind = st.kind + (f"({st.stages})" if st.stages else "") + (f" up to {st.limit}" if st.limit else "")
        binds = "".join(f", {n} = {expr(e)}" for n, e in st.binds)
        return f"for {st.var} in {kind} range({expr(st.extent)}){binds}:"
    if isinstance(st, kir.Nest):
        return f"parallel ({', '.join(st.axes)}){f' vector {st.vector}' if st.vector else ''}:"
    return repr(st)


def body(stmts, indent: int = 0) -> List[str]:
    out = []
    for st in stmts:
        out.append("  " * indent + stmt(st))
        if isinstance(st, (kir.Loop, kir.Nest)):
            out += body(st.body, indent + 1)
    return out


def tile(t: kir.Tile) -> str:
    flags = [f for f in ("split", "padded", "streamed") if getattr(t, f)]
    return ("whole" if t.block is None else _size(t.block)) + ("" if not flags else f" ({', '.join(flags)})")


def _size(e) -> str:
    """A size expression of the spec's language (a tile's block), read by its fields: the kernel IR
    imports nothing, so it does not know the spec's node types."""
    if hasattr(e, "dtype"):
        return expr(e)
    if hasattr(e, "id"):
        return e.id
    if hasattr(e, "lhs"):
        return f"({_size(e.lhs)} {e.op} {_size(e.rhs)})"
    if hasattr(e, "fn"):
        return f"{e.fn}({', '.join(_size(a) for a in e.args)})"
    if hasattr(e, "arg"):
        return f"{e.op}{_size(e.arg)}"
    if hasattr(e, "value"):
        return repr(e.value)
    return str(e)


def module(m: kir.Module) -> str:
    """The whole module as text."""
    out = [f"module {m.op} / {m.variant}"]
    if m.knobs:
        out.append("knobs: " + ", ".join(f"{k}={v!r}" for k, v in m.knobs))
    for k in m.kernels:
        out.append(f"kernel {k.name}{' persistent' if k.persistent else ''}:")
        if k.tiles:
            out.append("  tiles: " + "; ".join(f"{a}: {tile(t)}" for a, t in k.tiles))
        if k.grid:
            out.append("  grid: " + ", ".join(f"{ir.tile_var(a)} over {a}" for a in k.grid))
        out += body(k.body, 1)
    return "\n".join(out)
