"""Differentiable functions: every spec with a `backward:` block that names a `function`.

Attributes resolve lazily to the function generated in that op's `op.py`; they run the generated
forward kernel, and their registered autograd formula runs the generated backward kernel. Where
torch.nn.functional has the same function, it takes torch's arguments (docs/api-conventions.md).
"""
import importlib
import numbers

import torch

from .. import registry
from ..compat import _engram


def _functions():
    found = {}
    for pkg in registry.op_modules().values():
        mod = importlib.import_module(pkg + ".op")
        found.update(getattr(mod, "FUNCTIONAL", {}))
    return found


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    fns = _functions()
    if name not in fns:
        raise AttributeError(f"tkgen.nn.functional has no {name!r}; generated: {', '.join(sorted(fns)) or 'none'}")
    globals()[name] = fns[name]
    return fns[name]


def __dir__():
    return sorted(_functions())


def rms_norm(input, normalized_shape, weight=None, eps=None, *, residual=None, out_scale=1.0):
    """torch.nn.functional.rms_norm's arguments on tkgen's RMSNorm kernels (forward and backward).

    `normalized_shape` must be the last dim (the kernels normalize rows); leading dims are flattened.
    `eps=None` is torch's default, the machine epsilon of input's dtype. Beyond torch: `residual` is added
    to input first (in input's dtype), and the output is scaled by `out_scale`; see
    the generated op that defines `rms_norm` (`tkgen.nn.functional.__doc__`)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    if shape != tuple(input.shape[-1:]):
        raise ValueError(f"rms_norm: tkgen normalizes the last dim only: normalized_shape must be "
                         f"{tuple(input.shape[-1:])}, got {shape}")
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    rows = lambda t: None if t is None else t.reshape(-1, shape[0])  # noqa: E731
    if _RMS_NORM is None:
        raise AttributeError("tkgen.nn.functional.rms_norm: no generated op has the function `rms_norm`")
    out = _RMS_NORM(rows(input), weight, residual=rows(residual), eps=eps, out_scale=out_scale)
    return out.reshape(input.shape)


def engram_gate(hidden_states, k, v, weight_hidden, weight_embed, clamp_value=1e-6, eps=1e-20):
    """Engram's gated residual over [*, hc, D]: x + sigmoid(signed sqrt(<RMSNorm(x) * wh, RMSNorm(k) * we> /
    sqrt(D))) * v, with v [*, D] shared by the heads. Forward: the fused weight and the gate kernels;
    backward: the gate's backward kernel (the weight gradient reduced over the tokens in block order: two
    passes give the same bits) and the weight-gradient kernel, which adds into `weight.main_grad` (float32)
    where a weight has one. The composite spans four generated ops, which one spec's `backward:` block
    cannot chain, so it is TileKernels' EngramGateFn of the compat layer (docs/spec-language.md, Engram)."""
    return _engram.engram_gate(hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps)


# resolved when this module is imported, so that torch.compile only reads it (importing traces badly)
_RMS_NORM = _functions().get("rms_norm")
