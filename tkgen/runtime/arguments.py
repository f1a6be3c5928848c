"""Argument checks of the public entry points (tkgen.ops' composites, tkgen.nn, tkgen.compat): TypeError or
ValueError naming the function, the argument and the rule; the routing checks read an index tensor's bounds
back in one synchronisation; Missing for an option tkgen has not built."""
from __future__ import annotations

import torch


class Missing(NotImplementedError):
    """A TileKernels function or option that tkgen does not have (yet)."""

    def __init__(self, name: str, what: str = ""):
        super().__init__(f"tkgen.compat: TileKernels' {name}{' ' + what if what else ''} is not built in tkgen yet")


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
