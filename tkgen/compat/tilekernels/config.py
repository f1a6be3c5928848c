"""TileKernels 2.1.0's runtime knobs (`tile_kernels.config`, re-exported at the top), as far as they mean
anything for tkgen's kernels: process-global values that `reset_runtime_config()` restores.

- `set_amax_clamp_for_quant(fmt, use_e4m3_sf, value)`: the amax floor of every cast with scales. tkgen's
  floors are those of its formats (1e-4 for e4m3, 6 * 2^-126 for e2m1; 448 * 2^-9 and 6 * 2^-9 with e4m3
  scales), TileKernels' defaults; another value raises NotImplementedError (it would be a float param in
  every cast's compute, replacing the format's floor).
- `set_token_alignment(a)`: how a psum layout is decoded (the SwiGLU ops' psum_num_tokens_per_expert).
  Stored and checked (an integer > 0, as later TileKernels checks it).
- `use_deterministic_algorithms(flag)`: stored; as in 2.1.0, nothing reads it.
- `set_pdl(flag)`: stored; tkgen's launches are not chained by programmatic dependent launch, which
  changes no result.
"""
from __future__ import annotations

from .._common import Missing

_FLOORS = {("e4m3", False): 1e-4, ("e4m3", True): 448 * 2.0 ** -9,
           ("e2m1", False): 6 * 2.0 ** -126, ("e2m1", True): 6 * 2.0 ** -9}
_DEFAULTS = {"pdl": False, "token_alignment": 128, "deterministic": False}
_state = dict(_DEFAULTS)


def reset_runtime_config():
    _state.clear()
    _state.update(_DEFAULTS)


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


def get_amax_clamp_for_quant(fmt: str, use_e4m3_sf: bool = False) -> float:
    return _FLOORS[(fmt, bool(use_e4m3_sf))]


def set_amax_clamp_for_quant(fmt: str, use_e4m3_sf: bool, value: float):
    if float(value) != _FLOORS[(fmt, bool(use_e4m3_sf))]:
        raise Missing("set_amax_clamp_for_quant", f"with a clamp other than the {fmt} floor "
                      f"{_FLOORS[(fmt, bool(use_e4m3_sf))]!r} (tkgen's floor is its format's)")


__all__ = ["reset_runtime_config", "set_pdl", "get_pdl", "set_token_alignment", "get_token_alignment",
           "use_deterministic_algorithms", "get_deterministic_algorithms", "get_amax_clamp_for_quant",
           "set_amax_clamp_for_quant"]
