"""Differentiable functions: every spec with a `backward:` block that names a `function`.

Attributes resolve lazily to the function generated in that op's `op.py`; they run the generated
forward kernel, and their registered autograd formula runs the generated backward kernel. Where
torch.nn.functional has the same function, it takes torch's arguments (docs/api-conventions.md).
"""
import importlib
import numbers

import torch

from .. import registry
from .engram import engram_gate as _engram_gate
from ..runtime.arguments import tensor_arg
from .moe_mapping import get_fused_mapping
from .moe_autograd import moe_expand, moe_gate, moe_reduce


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
    tensor_arg("rms_norm", "input", input, (torch.bfloat16, torch.float32), None, "(..., H)", min_rank=1)
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
    return _engram_gate(hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps)


# resolved when this module is imported, so that torch.compile only reads it (importing traces badly)
_RMS_NORM = _functions().get("rms_norm")


# -- mHC (manifold hyper-connections): the first release's modeling composites --------------------------------
# The generated pieces, each differentiable through its generated backward, take tokens flattened into one
# dim: mhc_expand (x (T, D) -> (T, m, D)), mhc_mix_streams (x (T, m, D), mix (T, m) -> (T, D)),
# mhc_next_residual (x (T, D), residual (T, m, D), post (T, m), comb (T, m, m) -> (T, m, D)), mhc_split_mixes,
# sinkhorn and mhc_head_mix. The composites below take any leading dims, as TileKernels' do.
def _generated(name):
    fn = _GENERATED.get(name)
    if fn is None:
        raise AttributeError(f"tkgen.nn.functional: no generated op has the function {name!r}")
    return fn


def _tokens(t, trailing):
    """`t` with its leading dims flattened into one token dim, before `trailing` dims."""
    return t.reshape(-1, *t.shape[t.dim() - trailing:])


def mhc_norm_fn(residual, fn, norm_weight=None, norm_eps=1e-6):
    """The RMS-normalised projection of each token's m streams onto the rows of `fn` (TileKernels' pre-norm
    GEMM): with r the token's residual flattened to m * D values in float32 and F = fn * norm_weight,
    mixes = (r @ F^T) * rsqrt(sum(r^2) / (m * D) + norm_eps). residual (..., m, D); fn (rows, m * D);
    returns (..., rows) float32.

    Where the generated op takes the tensors (a bf16 residual, m * D a multiple of 32, at most 64 rows of a
    float32 fn), it is `mhc_norm_projection` (F rounded to TF32 as TileKernels rounds it; a TF32 tile matmul
    on CUDA, an ordered float32 loop on the CPU; docs/numerics.md), differentiable through its generated
    backward. Otherwise a float32 torch matmul of F unrounded, differentiable by torch's autograd."""
    if not isinstance(residual, torch.Tensor) or not residual.is_floating_point() or residual.dim() < 2:
        raise TypeError(f"mhc_norm_fn: `residual` must be a floating-point tensor (..., m, D), got "
                        f"{getattr(residual, 'dtype', type(residual).__name__)} of shape "
                        f"{tuple(getattr(residual, 'shape', ()))}")
    k = residual.shape[-2] * residual.shape[-1]
    if not isinstance(fn, torch.Tensor) or fn.dim() != 2 or fn.shape[1] != k:
        raise ValueError(f"mhc_norm_fn: `fn` must be a tensor (rows, m * D) = (rows, {k}), got "
                         f"{tuple(getattr(fn, 'shape', ()))}")
    if _fits_norm_projection(residual, fn, norm_weight, k):
        mixes = _generated("mhc_norm_projection")(residual.reshape(-1, k).contiguous(), fn.contiguous(),
                                                  None if norm_weight is None else norm_weight.contiguous(),
                                                  eps=float(norm_eps))
        return mixes.reshape(*residual.shape[:-2], fn.shape[0])
    r = residual.flatten(-2).float()
    a = r @ (fn if norm_weight is None else fn * norm_weight).t()
    return a * torch.rsqrt((r * r).sum(-1, keepdim=True) / r.shape[-1] + norm_eps)


def _fits_norm_projection(residual, fn, norm_weight, k) -> bool:
    """Whether the generated projection takes these tensors: its dtypes, its dims' bounds, one device."""
    return (residual.dtype == torch.bfloat16 and fn.dtype == torch.float32 and fn.dim() == 2 and fn.shape[1] == k
            and 32 <= k <= 131072 and k % 32 == 0 and 1 <= fn.shape[0] <= 64 and residual.device == fn.device
            and (norm_weight is None or (norm_weight.dtype == torch.float32 and tuple(norm_weight.shape) == (k,))))


def expand_from_embedding(x, mhc_mult=4):
    """x (..., D) bf16 -> (..., mhc_mult, D), every stream a copy; its gradient is the bf16 of the float32
    sum over the streams."""
    out = _generated("mhc_expand")(_tokens(x, 1), mhc_mult)
    return out.reshape(*x.shape[:-1], mhc_mult, x.shape[-1])


def mhc_mix(x, mix):
    """x (..., m, D) bf16, mix (..., m, 1) or (..., m) float32 -> (..., D) bf16: the streams weighted and
    added in stream order."""
    tensor_arg("mhc_mix", "x", x, (torch.bfloat16,), None, "(..., m, D)", min_rank=2)
    m, d = x.shape[-2:]
    return _generated("mhc_mix_streams")(_tokens(x, 2), mix.reshape(-1, m)).reshape(*x.shape[:-2], d)


def mhc_residual(x, residual, post_layer_mix, comb_res_mix):
    """The next residual (..., m, D) bf16 from the sublayer output x (..., D), the residual (..., m, D), the
    post mix (..., m, 1) or (..., m) and the comb mix (..., m, m), comb[i, o] taking stream i to stream o."""
    m = residual.shape[-2]
    out = _generated("mhc_next_residual")(_tokens(x, 1), _tokens(residual, 2), post_layer_mix.reshape(-1, m),
                                           comb_res_mix.reshape(-1, m, m))
    return out.reshape(residual.shape)


def mhc_pre(residual, fn, scale, base, *, norm_weight=None, norm_eps=1e-6, mhc_mult=4, post_mult_value=1.0,
            pre_eps=1e-6, sinkhorn_eps=1e-6, sinkhorn_repeat=10, n_splits=16):
    """TileKernels' mhc_pre: the sublayer input of each token and the mixes its residual update takes.

    mixes = mhc_norm_fn(residual, fn, norm_weight, norm_eps) (see there), then the generated
    mhc_split_mixes, sinkhorn of the comb mix and mhc_mix of the streams by the pre mix, each with its
    generated backward. residual (..., m, D) bf16, fn (m * (m + 2), m * D), scale (3,), base (m * (m + 2),)
    float32. Returns (layer_input (..., D) bf16, (post_mix (..., m, 1), comb_mix (..., m, m))), to be used as
    mhc_residual(sublayer(layer_input), residual, post_mix, comb_mix). `n_splits` is accepted and has no
    effect (as in TileKernels). Unlike TileKernels without gradients, `norm_weight` is always applied."""
    lead = residual.shape[:-2]
    mixes = _tokens(mhc_norm_fn(residual, fn, norm_weight, norm_eps), 1)
    pre, post, comb = _generated("mhc_split_mixes")(mixes, scale, base, mhc_mult, post_mult_value, pre_eps)
    comb = _generated("sinkhorn")(comb, sinkhorn_repeat, sinkhorn_eps)
    layer_input = mhc_mix(residual, pre)
    return layer_input, (post.reshape(*lead, mhc_mult, 1), comb.reshape(*lead, mhc_mult, mhc_mult))


def mhc_head(residual, fn, scale, base, *, norm_weight=None, norm_eps=1e-6, mhc_mult=4, pre_eps=1e-6, n_splits=16):
    """TileKernels' mhc_head: the streams of each token mixed into one hidden state, with weights
    sigmoid(mixes * scale + base) + pre_eps from mixes = mhc_norm_fn(residual, fn, ...) (fn (m, m * D);
    TileKernels pads it to m * (m + 2) rows, which changes nothing in the first m). scale: a scalar or (1,);
    base (m,). Returns (..., D) bf16."""
    mixes = _tokens(mhc_norm_fn(residual, fn, norm_weight, norm_eps), 1)[:, :mhc_mult].contiguous()
    scale = torch.as_tensor(scale, dtype=torch.float32, device=mixes.device).reshape(1)
    return mhc_mix(residual, _generated("mhc_head_mix")(mixes, scale, base, pre_eps))


_GENERATED = _functions()
