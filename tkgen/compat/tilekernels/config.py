"""TileKernels 2.1.0's runtime knobs (`tile_kernels.config`, re-exported at the top), as far as they mean
anything for tkgen's kernels: process-global values that `reset_runtime_config()` restores.

- `set_amax_clamp_for_quant(fmt, use_e4m3_sf, clamp_min_value)`: the amax floor of every cast into `fmt`
  ('e4m3' or 'e2m1') with (use_e4m3_sf) or without e4m3 scales made afterwards: a = max(amax, floor) before
  the scale. The defaults are TileKernels': 1e-4 for e4m3, 6 * 2^-126 for e2m1; 448 * 2^-9 and 6 * 2^-9 with
  e4m3 scales. The casts pass a floor other than the default to their kernel as its `amax_floor` param (a
  compile-time float: each value compiles its kernels once); at the default they call it as before. The
  floor must be a positive finite float32 (ValueError otherwise); with e4m3 scales one below the default is
  a NotImplementedError (tkgen's e4m3 scale rule floors a at max * 2^-9, so that sf is no e4m3 zero).
- `set_token_alignment(a)`: how a psum layout is decoded (the SwiGLU ops' psum_num_tokens_per_expert).
  Stored and checked (an integer > 0, as later TileKernels checks it).
- `use_deterministic_algorithms(flag)`: stored; as in 2.1.0, nothing reads it.
- `set_pdl(flag)`: stored; tkgen's launches are not chained by programmatic dependent launch, which
  changes no result.
"""
from __future__ import annotations

import numpy as np

from .._common import Missing

_FLOORS = {("e4m3", False): 1e-4, ("e4m3", True): 448 * 2.0 ** -9,
           ("e2m1", False): 6 * 2.0 ** -126, ("e2m1", True): 6 * 2.0 ** -9}
_floors = dict(_FLOORS)
F32_MAX = float(np.finfo(np.float32).max)
_DEFAULTS = {"pdl": False, "token_alignment": 128, "deterministic": False}
_state = dict(_DEFAULTS)


def reset_runtime_config():
    _state.clear()
    _state.update(_DEFAULTS)
    _floors.clear()
    _floors.update(_FLOORS)


def set_pdl(enable: bool):
    _state["pdl"] = bool(enable)


def get_pdl() -> bool:
    return _state["pdl"]


def set_token_alignment(alignment: int):
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
        raise ValueError(f"token alignment must be a positive integer; got {alignment!r}")
    _state["token_alignment"] = alignment


def get_token_alignment() -> int:
    return _state["token_alignment"]


def use_deterministic_algorithms(enable: bool):
    _state["deterministic"] = bool(enable)


def get_deterministic_algorithms() -> bool:
    return _state["deterministic"]


def _floor_key(fmt, use_e4m3_sf) -> tuple:
    if fmt not in ("e4m3", "e2m1"):
        raise ValueError(f"amax clamps are kept for fmt 'e4m3' and 'e2m1'; got fmt={fmt!r}")
    return fmt, bool(use_e4m3_sf)


def get_amax_clamp_for_quant(fmt: str, use_e4m3_sf: bool = False) -> float:
    return _floors[_floor_key(fmt, use_e4m3_sf)]


def set_amax_clamp_for_quant(fmt: str, use_e4m3_sf: bool, clamp_min_value: float):
    key = _floor_key(fmt, use_e4m3_sf)
    v = clamp_min_value
    ok = isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, (bool, np.bool_))
    if not ok or not 0 < float(v) <= F32_MAX or np.float32(float(v)) == 0:
        raise ValueError(f"clamp_min_value must be a positive finite float (one that float32 holds as a positive "
                         f"finite number, as the kernels compare in float32); got {v!r}")
    if key[1] and float(v) < _FLOORS[key]:
        raise Missing("set_amax_clamp_for_quant", f"with use_e4m3_sf=True and a clamp below {_FLOORS[key]!r} "
                      f"(tkgen's e4m3 scale rule floors the amax at max * 2^-9, where TileKernels' sf would "
                      f"round to e4m3 zero or a subnormal)")
    _floors[key] = float(v)


def amax_floor(fmt, use_e4m3_sf=False) -> dict:
    """The `amax_floor` argument of a cast into `fmt` (scales e4m3 or not): {} at the default floor (the
    op's own default, its specialization and fast path unchanged), else {"amax_floor": the stored floor}.
    Formats without a stored clamp (bf16, fp32, e5m2, ...) take none."""
    key = (fmt, bool(use_e4m3_sf))
    if key not in _FLOORS or _floors[key] == _FLOORS[key]:
        return {}
    return {"amax_floor": _floors[key]}


__all__ = ["reset_runtime_config", "set_pdl", "get_pdl", "set_token_alignment", "get_token_alignment",
           "use_deterministic_algorithms", "get_deterministic_algorithms", "get_amax_clamp_for_quant",
           "set_amax_clamp_for_quant"]
