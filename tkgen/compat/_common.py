"""What the TileKernels-compatible modules share: their options as tkgen params, input scales told
apart as TileKernels does, its column-major scale layout, and the NotImplementedError of what is missing."""
from __future__ import annotations

import torch

from ..runtime.layouts import col_major_empty

ELEMENT_OF_DTYPE = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2", torch.int8: "e2m1"}


def ops():
    import tkgen.ops
    return tkgen.ops


class Missing(NotImplementedError):
    """A TileKernels function or option that tkgen does not have (yet)."""

    def __init__(self, name: str, what: str = ""):
        super().__init__(f"tkgen.compat: TileKernels' {name}{' ' + what if what else ''} is not built in tkgen yet")


def missing(name: str, release: str):
    """A stand-in for a TileKernels function tkgen has no kernel for: raises Missing naming it."""
    def fn(*args, **kwargs):
        raise Missing(name)
    fn.__name__ = fn.__qualname__ = name.rsplit(".", 1)[-1]
    fn.__doc__ = f"TileKernels {release}'s `{name}`: not built in tkgen yet (raises NotImplementedError)."
    return fn


def need(ok: bool, name: str, what: str):
    if not ok:
        raise Missing(name, what)


def require(ok: bool, name: str, arg: str, rule: str, error=ValueError):
    """Raise `error` (ValueError, or TypeError for a wrong kind or dtype) naming the function, the argument
    and the rule it broke, where `ok` is false: the compat modules' check of user input (never `assert`,
    which `python -O` strips and which names neither)."""
    if not ok:
        raise error(f"{name}: `{arg}` {rule}")


def tensor_arg(name: str, arg: str, t, dtypes, rank=None, what: str = "", min_rank: int = 0):
    """Check that `t` is a torch.Tensor of one of `dtypes` and, unless None, of rank `rank`, and at least
    `min_rank` (TypeError, ValueError), naming the argument; `what` describes its shape ("[T, K]")."""
    shape = f" {what}" if what else ""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: `{arg}` must be a torch.Tensor{shape}, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: `{arg}` must have dtype {' or '.join(map(str, dtypes))}, got {t.dtype}")
    if rank is not None and t.dim() != rank:
        raise ValueError(f"{name}: `{arg}` must have rank {rank}{shape}, got shape {tuple(t.shape)}")
    if t.dim() < min_rank:
        raise ValueError(f"{name}: `{arg}` must have rank {min_rank} or more{shape}, got shape {tuple(t.shape)}")


def value_bounds(*tensors):
    """[(min, max) or None per tensor]: every bound computed on the tensors' device (one aminmax each) and
    read back to the host together, at the cost of one synchronisation; None for an empty tensor."""
    given = [t for t in tensors if t.numel()]
    if not given:
        return [None] * len(tensors)
    read = iter(torch.stack([torch.stack(torch.aminmax(t)).to(torch.int64) for t in given]).tolist())
    return [tuple(next(read)) if t.numel() else None for t in tensors]


def within(name: str, arg: str, bounds, lo, hi: int, meaning: str = ""):
    """ValueError naming `arg` unless its (min, max) `bounds` lie in [lo, hi] (lo None: no lower bound;
    bounds None: an empty tensor)."""
    if bounds is not None and ((lo is not None and bounds[0] < lo) or bounds[1] > hi):
        bad = bounds[0] if lo is not None and bounds[0] < lo else bounds[1]
        rule = f"in [{lo}, {hi}]" if lo is not None else f"at most {hi}"
        raise ValueError(f"{name}: `{arg}` must hold values {rule}{meaning}, found {bad}")


def scale_format(name, round_sf: bool, use_packed_ue8m0: bool, use_e4m3_sf=None) -> str:
    """tkgen's scale format for TileKernels' flags: float32, rounded up to a power of two, packed UE8M0
    (four exponent bytes per int32, which TileKernels writes only for rounded scales), or e4m3 (ops whose
    TileKernels signature has use_e4m3_sf; None where it has not)."""
    if use_e4m3_sf:
        require(not round_sf, name, "use_e4m3_sf", "is incompatible with round_sf=True")
        return "e4m3"
    if use_packed_ue8m0:
        need(round_sf, name, "with use_packed_ue8m0=True and round_sf=False")
        return "ue8m0"
    return "pow2" if round_sf else "fp32"


def input_scale(sf: torch.Tensor) -> str:
    """The scale format of a given scale tensor, told apart as TileKernels does: int32 is packed UE8M0,
    float8_e4m3fn is e4m3, anything else float32 (in either layout: tkgen reads it row-major)."""
    return {torch.int32: "ue8m0", torch.float8_e4m3fn: "e4m3"}.get(sf.dtype, "fp32")


def row_major(sf: torch.Tensor) -> torch.Tensor:
    return sf.contiguous()


def col_major(sf: torch.Tensor) -> torch.Tensor:
    """`sf` in TileKernels' TMA-aligned column-major layout: a [rows, cols] view of a [cols, rows padded
    to 16 bytes] buffer."""
    out = col_major_empty(tuple(sf.shape), 16 // sf.element_size(), sf.dtype, sf.device)
    return out.copy_(sf)


def laid_out(sf: torch.Tensor, use_tma_aligned_col_major_sf: bool) -> torch.Tensor:
    return col_major(sf) if use_tma_aligned_col_major_sf else sf


def written_into(name: str, out, tensors: dict, params: dict):
    """Op `name` run with its kernel storing straight into the tensors of `out` (TileKernels' `out=`),
    which are returned. They must have the shapes, dtypes and strides tkgen allocates (ValueError
    otherwise). The call takes the full argument check, not the eager fast path."""
    from .. import registry
    from ..runtime.fastpath import run
    outs = run(registry.op_package(name).OP, tensors, params, out=out)
    return outs[0] if len(outs) == 1 else outs


def into(out, result):
    """TileKernels' `out=` where tkgen's op writes new tensors: the result copied into the given tensors,
    which are returned."""
    if out is None:
        return result
    if isinstance(result, torch.Tensor):
        return out.copy_(result)
    for o, r in zip(out, result):
        o.copy_(r)
    return out


CODE_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.uint8)


def quant_tensor(name, x):
    """(codes, scales) of a quantized argument `x`: 8-bit codes [rows, cols] and a scale tensor."""
    require(isinstance(x, (tuple, list, torch.Tensor)), name, "x",
            f"must be a (codes, scales) pair, got {type(x).__name__}", TypeError)
    need(isinstance(x, (tuple, list)) and len(x) == 2, name, "without a (tensor, scales) pair")
    tensor_arg(name, "x", x[0], CODE_DTYPES, 2, "(codes [rows, cols], scales)")
    tensor_arg(name, "x", x[1], (torch.float32, torch.int32, torch.float8_e4m3fn), None, "(codes, scales)")
    return x[0], x[1]


def element_format(name, q: torch.Tensor, special=None) -> str:
    if special is not None:
        need(special == "e5m6" and q.dtype == torch.uint8, name, f"with x_special_fmt={special!r}")
        return "e5m6"
    require(q.element_size() == 1, name, "x", f"must hold 8-bit codes (float8_e4m3fn, float8_e5m2, int8), got "
                                             f"{q.dtype}", TypeError)
    need(q.dtype in ELEMENT_OF_DTYPE, name, f"of {q.dtype} codes")
    return ELEMENT_OF_DTYPE[q.dtype]


def out_format(dtype: torch.dtype, name: str = "tkgen.compat", arg: str = "x") -> str:
    """"bf16" or "fp32" for the dtype of argument `arg` (TypeError naming it otherwise)."""
    fmt = {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype)
    require(fmt is not None, name, arg, f"must have dtype torch.bfloat16 or torch.float32, got {dtype}", TypeError)
    return fmt


def int_arg(name: str, arg: str, v, lo: int, hi=None):
    """ValueError naming `arg` unless v is an int (not a bool) in [lo, hi] (hi None: no upper bound)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        rule = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name}: `{arg}` must be an integer {rule}, got {v!r}")


def checks_values(t: torch.Tensor, no_sync: bool = False) -> bool:
    """Whether the routing checks read `t`'s values: always on the CPU; on CUDA unless the caller asked for
    no synchronisation (force_no_sync) or a CUDA graph is being captured, where reading a value back is
    not allowed; the caller then vouches for the values, as with TileKernels. Not while torch.compile
    traces (fake tensors have no values)."""
    if torch.compiler.is_compiling():      # traced: no value to read (the ops check what they can)
        return False
    if t.device.type != "cuda":
        return True
    return not no_sync and not torch.cuda.is_current_stream_capturing()


def routing_ids(name: str, arg: str, ids, num: int, what: str = "experts", no_sync: bool = False):
    """Expert (or group) ids: int64 [T, K], each in [-1, num) (-1: none). One aminmax on the device and one
    read-back."""
    tensor_arg(name, arg, ids, (torch.int64,), 2, "[T, K]")
    if checks_values(ids, no_sync):
        within(name, arg, value_bounds(ids)[0], -1, num - 1, f" (-1 for none, else one of the {num} {what})")


def positions(name: str, arg: str, pos, rows: int, distinct: bool, others=()):
    """Positions of (token, k) pairs in an expanded layout of `rows` rows: int32 [T, K], each in [-1, rows)
    (-1: none) and, where `distinct` (a layout stored into), no row twice. `others`: (arg, tensor, lo, hi)
    of further int tensors bounded in the same read-back. One aminmax per tensor (and a bincount over the
    positions when distinct) on the device and one read-back in all."""
    tensor_arg(name, arg, pos, (torch.int32,), 2, "[T, K]")
    if not checks_values(pos):
        return
    tensors = [pos] + [o[1] for o in others]
    if distinct and pos.numel():
        # clamped first, so that an out-of-range position (reported below) cannot size the count
        counts = torch.bincount(pos.reshape(-1).clamp(-1, rows).to(torch.int64) + 1, minlength=rows + 2)
        tensors.append(counts[1:rows + 1] if rows else counts[:1] * 0)
    bounds = value_bounds(*tensors)
    within(name, arg, bounds[0], -1, rows - 1, f" (-1 for none, else a row of the {rows} expanded rows)")
    for (oarg, _, lo, hi), b in zip(others, bounds[1:]):
        within(name, oarg, b, lo, hi)
    if distinct and pos.numel() and bounds[-1] is not None and bounds[-1][1] > 1:
        raise ValueError(f"{name}: `{arg}` must hold distinct positions (each row of the expanded layout is "
                         f"stored once), found a row {bounds[-1][1]} times")
