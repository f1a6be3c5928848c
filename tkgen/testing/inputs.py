"""Turn input recipes (drawn by the generated strategies) into tensors, deterministically."""
from __future__ import annotations

import math

import torch

from ..runtime.ops import TORCH_DTYPES


def _extremes(dtype):
    info = torch.finfo(dtype)
    return info.max, info.smallest_normal, info.smallest_normal * info.eps   # max, min normal, min subnormal


def encode_codes(values: torch.Tensor, codec: dict) -> torch.Tensor:
    """float32 values -> the container tensor of a format-typed input (see runtime.ops.InputInfo):
    elements through the generated encoder and packing; scales as float32 or as UE8M0 bytes of |v|
    (exponents kept in [1, 254], so every scale is a finite, non-zero power of two)."""
    from .. import registry
    from ..runtime import torch_prims as P
    registry.use_generated()
    from tkgen_generated.common import torch_helpers as H
    container = TORCH_DTYPES[codec["container"]]
    if codec["kind"] == "scale" and codec["store"] == "float":
        return values.to(torch.float32)
    if codec["kind"] == "scale":
        codes = ((P._bits(values.abs()) >> 23) & 0xFF).clamp(1, 254)
    else:
        codes = getattr(H, f"encode_{codec['name']}")(values.to(torch.float32))
    if codec["pack"]:
        return P._pack_codes(codes, tuple(codec["pack"]), container)
    return P._codes_as(codes, torch.uint8 if container.itemsize == 1 else container, container)


def _distinct(lo, hi, n, g) -> torch.Tensor:
    """n integers in [lo, hi] whose non-negative ones are distinct: a random arrangement of [max(lo, 0), hi],
    with about a quarter of the entries (and those the range cannot fill) negative where lo < 0."""
    first = max(lo, 0)
    if lo >= 0 and n > hi - lo + 1:
        raise ValueError(f"{n} distinct values do not fit in [{lo}, {hi}]")
    pool = torch.randperm(max(hi - first + 1, 0), generator=g)[:n] + first
    x = torch.full((n,), lo, dtype=torch.int64)
    x[:pool.numel()] = pool
    if lo < 0:
        x = torch.where(torch.randint(0, 4, (n,), generator=g) == 0, torch.randint(lo, 0, (n,), generator=g), x)
        x = x[torch.randperm(n, generator=g)]
    return x


def materialize(recipe: dict, shape, device="cpu") -> torch.Tensor:
    """The tensor a recipe describes: same recipe and shape, same bits, on any device."""
    if "codec" in recipe:
        values = materialize({k: v for k, v in recipe.items() if k not in ("codec", "logical")},
                             tuple(recipe["logical"]))
        return encode_codes(values, recipe["codec"]).reshape(shape).to(device)
    dtype = TORCH_DTYPES[recipe["dtype"]]
    g = torch.Generator().manual_seed(recipe["seed"])
    n = 1
    for s in shape:
        n *= s
    if not dtype.is_floating_point:
        lo, hi = recipe.get("range", (-1000, 999))       # `values: range` of an integer input (inclusive)
        if recipe.get("distinct"):
            x = _distinct(lo, hi, n, g)
        elif hi - lo < 2 ** 62:
            x = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64)
        else:       # a span past torch.randint's int64 bounds: 64 random bits (two halves), within the range
            top = torch.randint(-2 ** 31, 2 ** 31, (n,), generator=g, dtype=torch.int64)
            x = ((top << 32) | torch.randint(0, 2 ** 32, (n,), generator=g, dtype=torch.int64)).clamp(lo, hi)
        return x.to(dtype).reshape(shape).to(device)
    style = recipe["style"]
    if style == "discrete":
        x = torch.randint(-3, 4, (n,), generator=g).to(torch.float32)
    elif style == "wide":
        x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-40, 40, (n,), generator=g).float())
    else:
        x = torch.randn(n, generator=g)
    big, normal, sub = _extremes(dtype)
    x = x * 2.0 ** recipe["scale_exp"]
    if dtype.itemsize == 1:
        # FP8 values as TileKernels makes them, through a saturating cast (torch's own gives NaN past the
        # largest finite value)
        x = x.clamp(-big, big)
    x = x.to(dtype)
    if "max_abs" in recipe and n:
        # `values: max_abs`: scaled down by a power of two (the same values but for their exponents), before
        # the specials, of which a spec with a bound draws none larger than the values
        largest = float(x.abs().float().max())
        if largest > recipe["max_abs"]:
            x = x * 2.0 ** -math.ceil(math.log2(largest / recipe["max_abs"]))
            while float(x.abs().float().max()) > recipe["max_abs"]:
                x = x * 0.5
    if n:
        cols = shape[-1] if len(shape) else 1
        # row scalings first, so that a later special (max, inf, ...) lands exactly as drawn
        order = sorted(recipe["specials"], key=lambda s: s[0] not in ("huge", "tiny"))
        for kind, a, b, count in order:
            at = [(a + 7919 * i) % n for i in range(count)]
            row = (a % max(1, n // cols))
            if kind == "zero_rows":
                x[row * cols:(row + 1) * cols] = 0
            elif kind == "huge":
                # scaled up but kept finite: inf and NaN are drawn only where a spec asks for them
                r = x[row * cols:(row + 1) * cols].float() * 2.0 ** 60
                x[row * cols:(row + 1) * cols] = r.clamp(-big, big).to(dtype)
            elif kind == "tiny":
                # in float32, as bf16 arithmetic rounds (FP8 has none)
                x[row * cols:(row + 1) * cols] = (x[row * cols:(row + 1) * cols].float() * 2.0 ** -60).to(dtype)
            elif kind == "ties":
                x[at] = x[b % n].item()
            else:
                value = {"max": big, "subnormal": sub * (1 + b % 5), "neg_zero": -0.0, "inf": float("inf"),
                         "nan": float("nan")}[kind]
                sign = -1.0 if b % 2 and kind != "neg_zero" else 1.0   # NaNs come with either sign
                x[at] = torch.tensor(sign * value, dtype=torch.float32).to(dtype)
    return x.reshape(shape).to(device)


def build_inputs(case: dict, device="cpu") -> dict:
    return {name: None if r is None else materialize(r, tuple(case["shapes"][name]), device)
            for name, r in case["inputs"].items()}
