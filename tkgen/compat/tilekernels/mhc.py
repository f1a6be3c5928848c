"""`tile_kernels.mhc` of TileKernels 2.1.0 on tkgen's kernels: the raw kernel entry points, destination-passing
(operators-v2.md 2.19): each forward writes the output tensors it is given (and returns None, as 2.1.0's do,
except mhc_post_fwd, which returns `out`, allocating it when None); each backward writes the gradient tensors it
is given, except mhc_post_bwd (which returns its four gradients) and mhc_pre_apply_mix_bwd (which adds x's
gradient into `x_grad` in place and returns mix's gradient).

Shapes are 2.1.0's: tokens first, flattened (`(T, m)` mixes, `(T, m, m)` or `(T, m * m)` combination matrices,
`(T, m, D)` residuals), except mhc_post_fwd/bwd, which take `(n0, n1, ...)`. Leading dims beyond the token dim
are flattened where 2.1.0's shapes allow it. Output tensors may have any strides: the result is copied into them.

Where 2.1.0 writes per-SM partial sums (mhc_head_compute_mix_bwd's `(num_sms, 1)` and `(num_sms, m)`), tkgen
writes the whole sum into row 0 and zeros into the other rows, so the caller's `.sum(0)` is the sum.
mhc_fn_normw_merge_bwd adds into fn_grad and normw_grad (as 2.1.0's kernel does). mhc_pre_big_fuse_fwd and
mhc_multilayer_recompute call the generated single-layer ops in sequence (2.1.0's contract: bit-equal to them). Argument errors raise
TypeError (a wrong type or dtype) or ValueError (a wrong shape or value) naming the argument."""
from __future__ import annotations

import torch

from .._common import ops

RELEASE = "2.1.0"
_F32, _BF16 = torch.float32, torch.bfloat16


# --- argument checks -----------------------------------------------------------------------------------------

def _tensor(fn, name, t, dtype, dim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{fn}: {name} must be {dtype}, got {t.dtype}")
    if dim is not None and t.dim() != dim:
        raise ValueError(f"{fn}: {name} must have {dim} dims, got shape {tuple(t.shape)}")
    return t


def _shape(fn, name, t, shape):
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def _numel(fn, name, t, shape):
    """`t` holds a tensor of `shape` (2.1.0 declares some flat, e.g. (T, m * m) for (T, m, m), and callers pass
    (n0, n1, m, 1) for (T, m)): the same elements, token-major."""
    n = 1
    for s in shape:
        n *= s
    if t.numel() != n:
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)} (or another of its elements), "
                         f"got {tuple(t.shape)}")


def _int(fn, name, v, lo=None):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{fn}: {name} must be an int, got {type(v).__name__}")
    if lo is not None and v < lo:
        raise ValueError(f"{fn}: {name} must be >= {lo}, got {v}")
    return v


def _float(fn, name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{fn}: {name} must be a float, got {type(v).__name__}")
    return float(v)


def _write(dst, src):
    dst.copy_(src.reshape(dst.shape))


def _tokens2(t):
    """(..., k) -> (T, k)."""
    return t.reshape(-1, t.shape[-1])


# --- expand ----------------------------------------------------------------------------------------------------

def expand_to_mhc_fwd(x, o):
    """o[t, s, :] = x[t, :] for every stream s: x (T, D) bf16, o (T, m, D) bf16 (written)."""
    fn = "expand_to_mhc_fwd"
    _tensor(fn, "x", x, _BF16)
    if x.dim() < 2:
        raise ValueError(f"{fn}: x must have 2 dims (T, D) or more, got shape {tuple(x.shape)}")
    _tensor(fn, "o", o, _BF16)
    if o.dim() != x.dim() + 1 or o.shape[:-2] != x.shape[:-1] or o.shape[-1] != x.shape[-1]:
        raise ValueError(f"{fn}: o must have shape {tuple(x.shape[:-1])} + (mhc_mult, {x.shape[-1]}), "
                         f"got {tuple(o.shape)}")
    m = o.shape[-2]
    _write(o, ops().expand_to_mhc(_tokens2(x), m))


def expand_to_mhc_bwd(o_grad, x_grad):
    """x_grad = bf16(the float32 sum over streams of o_grad, in stream order): o_grad (T, m, D), x_grad (T, D)."""
    fn = "expand_to_mhc_bwd"
    _tensor(fn, "o_grad", o_grad, _BF16)
    _tensor(fn, "x_grad", x_grad, _BF16)
    if o_grad.dim() != x_grad.dim() + 1 or o_grad.shape[:-2] != x_grad.shape[:-1] \
            or o_grad.shape[-1] != x_grad.shape[-1]:
        raise ValueError(f"{fn}: o_grad must have shape {tuple(x_grad.shape[:-1])} + (mhc_mult, "
                         f"{x_grad.shape[-1]}), got {tuple(o_grad.shape)}")
    m, d = o_grad.shape[-2:]
    _write(x_grad, ops().expand_to_mhc_backward(o_grad.reshape(-1, m, d).contiguous()))


# --- head mix --------------------------------------------------------------------------------------------------

def _head_args(fn, input_mix, mhc_scale, mhc_base):
    _tensor(fn, "input_mix", input_mix, _F32, 2)
    m = input_mix.shape[1]
    _tensor(fn, "mhc_scale", mhc_scale, _F32)
    _shape(fn, "mhc_scale", mhc_scale, (1,))
    _tensor(fn, "mhc_base", mhc_base, _F32)
    _shape(fn, "mhc_base", mhc_base, (m,))
    return m


def mhc_head_compute_mix_fwd(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps: float,
                             token_block_size: int = 0):
    """output_mix = sigmoid(input_mix * mhc_scale[0] + mhc_base) + mhc_pre_eps: input_mix, output_mix (T, m)
    float32, mhc_scale (1,), mhc_base (m,). token_block_size (0: the kernel's choice) is a tuning knob tkgen's
    schedule decides."""
    fn = "mhc_head_compute_mix_fwd"
    _head_args(fn, input_mix, mhc_scale, mhc_base)
    _tensor(fn, "output_mix", output_mix, _F32)
    _shape(fn, "output_mix", output_mix, input_mix.shape)
    eps = _float(fn, "mhc_pre_eps", mhc_pre_eps)
    _int(fn, "token_block_size", token_block_size, 0)
    _write(output_mix, ops().mhc_head_compute_mix(input_mix.contiguous(), mhc_scale.contiguous(),
                                                  mhc_base.contiguous(), eps))


def mhc_head_compute_mix_bwd(output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad,
                             mhc_scale_grad_partial, mhc_base_grad_partial, num_sms: int,
                             token_block_size: int = 0):
    """With s = sigmoid(input_mix * scale + base) and u = output_mix_grad * s * (1 - s): input_mix_grad =
    u * scale; the sums of u * input_mix (over tokens and streams) and of u (over tokens) are written into
    row 0 of mhc_scale_grad_partial (num_sms, 1) and mhc_base_grad_partial (num_sms, m), zeros into the
    other rows (2.1.0 writes one partial sum per SM: the caller adds the rows)."""
    fn = "mhc_head_compute_mix_bwd"
    m = _head_args(fn, input_mix, mhc_scale, mhc_base)
    _tensor(fn, "output_mix_grad", output_mix_grad, _F32)
    _shape(fn, "output_mix_grad", output_mix_grad, input_mix.shape)
    _tensor(fn, "input_mix_grad", input_mix_grad, _F32)
    _shape(fn, "input_mix_grad", input_mix_grad, input_mix.shape)
    _int(fn, "num_sms", num_sms, 1)
    _int(fn, "token_block_size", token_block_size, 0)
    _tensor(fn, "mhc_scale_grad_partial", mhc_scale_grad_partial, _F32)
    _shape(fn, "mhc_scale_grad_partial", mhc_scale_grad_partial, (num_sms, 1))
    _tensor(fn, "mhc_base_grad_partial", mhc_base_grad_partial, _F32)
    _shape(fn, "mhc_base_grad_partial", mhc_base_grad_partial, (num_sms, m))
    xg, sg, bg = ops().mhc_head_compute_mix_backward(output_mix_grad.contiguous(), input_mix.contiguous(),
                                                     mhc_scale.contiguous(), mhc_base.contiguous())
    _write(input_mix_grad, xg)
    mhc_scale_grad_partial.zero_()
    mhc_base_grad_partial.zero_()
    mhc_scale_grad_partial[0].copy_(sg.reshape(1))
    mhc_base_grad_partial[0].copy_(bg.reshape(m))


# --- post ------------------------------------------------------------------------------------------------------

def _post_args(fn, x, residual, post_layer_mix, comb_res_mix):
    _tensor(fn, "x", x, _BF16, 3)                 # in the order of the signature: the first wrong one is named
    _tensor(fn, "residual", residual, _BF16, 4)
    n0, n1, m, d = residual.shape
    _shape(fn, "x", x, (n0, n1, d))
    _tensor(fn, "post_layer_mix", post_layer_mix, _F32)
    _shape(fn, "post_layer_mix", post_layer_mix, (n0, n1, m, 1))
    _tensor(fn, "comb_res_mix", comb_res_mix, _F32)
    _shape(fn, "comb_res_mix", comb_res_mix, (n0, n1, m, m))
    return n0 * n1, m, d


def mhc_post_fwd(x, residual, post_layer_mix, comb_res_mix, out=None):
    """The next residual, out[.., o, :] = bf16(post[o] * x + the sum over i, in order, of comb[i, o] *
    residual[i]) (float32): x (n0, n1, D) bf16, residual (n0, n1, m, D) bf16, post_layer_mix (n0, n1, m, 1),
    comb_res_mix (n0, n1, m, m) float32. Returns `out` (allocated like residual when None)."""
    fn = "mhc_post_fwd"
    n, m, d = _post_args(fn, x, residual, post_layer_mix, comb_res_mix)
    if out is None:
        out = torch.empty_like(residual, memory_format=torch.contiguous_format)
    else:
        _tensor(fn, "out", out, _BF16)
        _shape(fn, "out", out, residual.shape)
    res = ops().mhc_post(x.reshape(n, d).contiguous(), residual.reshape(n, m, d).contiguous(),
                         post_layer_mix.reshape(n, m).contiguous(), comb_res_mix.reshape(n, m, m).contiguous())
    _write(out, res)
    return out


def mhc_post_bwd(x, residual, post_layer_mix, comb_res_mix, d_o):
    """(d_x, d_residual, d_post_layer_mix, d_comb_res_mix), shaped like x, residual, post_layer_mix and
    comb_res_mix: d_residual[i] = the sum over o of comb[i, o] * d_o[o], d_x = the sum over o of post[o] *
    d_o[o] (bf16); d_post[o] = the sum over D of x * d_o[o], d_comb[i, o] = that of residual[i] * d_o[o]
    (float32)."""
    fn = "mhc_post_bwd"
    n, m, d = _post_args(fn, x, residual, post_layer_mix, comb_res_mix)
    _tensor(fn, "d_o", d_o, _BF16)
    _shape(fn, "d_o", d_o, residual.shape)
    dx, dr, dp, dc = ops().mhc_post_backward(d_o.reshape(n, m, d).contiguous(), x.reshape(n, d).contiguous(),
                                             residual.reshape(n, m, d).contiguous(),
                                             post_layer_mix.reshape(n, m).contiguous(),
                                             comb_res_mix.reshape(n, m, m).contiguous())
    return (dx.view(x.shape), dr.view(residual.shape), dp.view(post_layer_mix.shape),
            dc.view(comb_res_mix.shape))


# --- pre apply mix ---------------------------------------------------------------------------------------------

def _apply_args(fn, x, mix):
    _tensor(fn, "x", x, _BF16, 3)
    n, m, d = x.shape
    _tensor(fn, "mix", mix, _F32)
    _numel(fn, "mix", mix, (n, m))
    return n, m, d


def mhc_pre_apply_mix_fwd(x, mix, o):
    """o = bf16(the float32 sum over streams, in order, of mix[j] * x[j]): x (T, m, D) bf16, mix (T, m) float32
    (or (T, m, 1)), o (T, D) bf16 (written)."""
    fn = "mhc_pre_apply_mix_fwd"
    n, m, d = _apply_args(fn, x, mix)
    _tensor(fn, "o", o, _BF16)
    _shape(fn, "o", o, (n, d))
    _write(o, ops().mhc_pre_apply_mix(x.contiguous(), mix.reshape(n, m).contiguous()))


def mhc_pre_apply_mix_bwd(o_grad, x, mix, x_grad):
    """Adds mix[j] * o_grad into x_grad[j] in place (bf16(x_grad + mix * o_grad), one rounding) and returns
    mix_grad (T, m) float32, the sum over D of o_grad * x[j]."""
    fn = "mhc_pre_apply_mix_bwd"
    n, m, d = _apply_args(fn, x, mix)
    _tensor(fn, "o_grad", o_grad, _BF16)
    _shape(fn, "o_grad", o_grad, (n, d))
    _tensor(fn, "x_grad", x_grad, _BF16)
    _shape(fn, "x_grad", x_grad, x.shape)
    acc = x_grad if x_grad.is_contiguous() else x_grad.contiguous()
    xg, mg = ops().mhc_pre_apply_mix_backward(o_grad.contiguous(), x.contiguous(), mix.reshape(n, m).contiguous(),
                                             acc)
    x_grad.copy_(xg)
    return mg


# --- pre split mixes -------------------------------------------------------------------------------------------

def _split_args(fn, input_mixes, mhc_scale, mhc_base, pre_layer_mix):
    _tensor(fn, "input_mixes", input_mixes, _F32, 2)
    t, m3 = input_mixes.shape
    _tensor(fn, "pre_layer_mix", pre_layer_mix, _F32)
    m = pre_layer_mix.shape[-1] if pre_layer_mix.dim() == 2 else (pre_layer_mix.numel() // max(t, 1))
    if m * (m + 2) != m3:
        raise ValueError(f"{fn}: input_mixes must have m * (m + 2) = {m * (m + 2)} columns for m = {m} "
                         f"streams, got {m3}")
    _numel(fn, "pre_layer_mix", pre_layer_mix, (t, m))
    _tensor(fn, "mhc_scale", mhc_scale, _F32)
    _shape(fn, "mhc_scale", mhc_scale, (3,))
    _tensor(fn, "mhc_base", mhc_base, _F32)
    _shape(fn, "mhc_base", mhc_base, (m3,))
    return t, m


def mhc_pre_split_mixes_fwd(input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix,
                            mhc_post_mult_value: float, mhc_pre_eps: float):
    """input_mixes (T, m * (m + 2)) float32 -> pre (T, m) = sigmoid(x[:m] * s0 + b[:m]) + mhc_pre_eps, post
    (T, m) = sigmoid(x[m:2m] * s1 + b[m:2m]) * mhc_post_mult_value, comb (T, m * m) = x[2m:] * s2 + b[2m:]
    (row-major (j, k)); the three written."""
    fn = "mhc_pre_split_mixes_fwd"
    t, m = _split_args(fn, input_mixes, mhc_scale, mhc_base, pre_layer_mix)
    _tensor(fn, "post_layer_mix", post_layer_mix, _F32)
    _numel(fn, "post_layer_mix", post_layer_mix, (t, m))
    _tensor(fn, "comb_res_mix", comb_res_mix, _F32)
    _numel(fn, "comb_res_mix", comb_res_mix, (t, m * m))
    pm = _float(fn, "mhc_post_mult_value", mhc_post_mult_value)
    eps = _float(fn, "mhc_pre_eps", mhc_pre_eps)
    pre, post, comb = ops().mhc_pre_split_mixes(input_mixes.contiguous(), mhc_scale.contiguous(),
                                                mhc_base.contiguous(), m, pm, eps)
    _write(pre_layer_mix, pre)
    _write(post_layer_mix, post)
    _write(comb_res_mix, comb)


def mhc_pre_split_mixes_bwd(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes,
                            post_layer_mix, mhc_scale, mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad,
                            mhc_post_mult_value: float):
    """Writes input_mixes_grad (T, m * (m + 2)), mhc_scale_grad (3,) and mhc_base_grad (m * (m + 2),): with
    u_pre = g_pre * s * (1 - s) (s recomputed without pre_eps), u_post = g_post * p * (1 - p / post_mult) (p the
    saved post) and u_comb = g_comb: input_mixes_grad = u * scale[group]; mhc_base_grad = the sum over tokens
    of u; mhc_scale_grad[group] = that of u * input_mixes (group = min(2, j // m))."""
    fn = "mhc_pre_split_mixes_bwd"
    t, m = _split_args(fn, input_mixes, mhc_scale, mhc_base, pre_layer_mix_grad)
    for name, v, shape in (("post_layer_mix_grad", post_layer_mix_grad, (t, m)),
                           ("comb_res_mix_grad", comb_res_mix_grad, (t, m * m)),
                           ("post_layer_mix", post_layer_mix, (t, m)),
                           ("input_mixes_grad", input_mixes_grad, (t, m * (m + 2)))):
        _tensor(fn, name, v, _F32)
        _numel(fn, name, v, shape)
    _tensor(fn, "mhc_scale_grad", mhc_scale_grad, _F32)
    _shape(fn, "mhc_scale_grad", mhc_scale_grad, (3,))
    _tensor(fn, "mhc_base_grad", mhc_base_grad, _F32)
    _shape(fn, "mhc_base_grad", mhc_base_grad, (m * (m + 2),))
    pm = _float(fn, "mhc_post_mult_value", mhc_post_mult_value)
    xg, sg, bg = ops().mhc_pre_split_mixes_backward(
        pre_layer_mix_grad.reshape(t, m).contiguous(), post_layer_mix_grad.reshape(t, m).contiguous(),
        comb_res_mix_grad.reshape(t, m, m).contiguous(), input_mixes.contiguous(),
        post_layer_mix.reshape(t, m).contiguous(), mhc_scale.contiguous(), mhc_base.contiguous(), m, pm)
    _write(input_mixes_grad, xg)
    _write(mhc_scale_grad, sg)
    _write(mhc_base_grad, bg)


# --- Sinkhorn --------------------------------------------------------------------------------------------------

def _sinkhorn_args(fn, names, tensors, repeat, eps):
    first = _tensor(fn, names[0], tensors[0], _F32, 3)
    t, n, n2 = first.shape
    if n != n2:
        raise ValueError(f"{fn}: {names[0]} must be (T, m, m), got {tuple(first.shape)}")
    for name, v in zip(names[1:], tensors[1:]):
        _tensor(fn, name, v, _F32)
        _shape(fn, name, v, first.shape)
    _int(fn, "repeat", repeat, 1)
    return float(_float(fn, "eps", eps))


def mhc_sinkhorn_fwd(comb_res_mix, comb_res_mix_out, repeat: int, eps: float):
    """comb_res_mix_out = Sinkhorn of comb_res_mix (T, m, m) float32: P = softmax over rows + eps, then P / (column
    sums + eps), then repeat - 1 times rows then columns (operators-v1.md 7.4)."""
    eps = _sinkhorn_args("mhc_sinkhorn_fwd", ("comb_res_mix", "comb_res_mix_out"),
                         (comb_res_mix, comb_res_mix_out), repeat, eps)
    _write(comb_res_mix_out, ops().sinkhorn_normalize(comb_res_mix.contiguous(), repeat, eps))


def mhc_sinkhorn_bwd(grad_output, x, grad_input, repeat: int, eps: float):
    """grad_input = the gradient of mhc_sinkhorn_fwd at x (T, m, m) for grad_output (written)."""
    eps = _sinkhorn_args("mhc_sinkhorn_bwd", ("grad_output", "x", "grad_input"), (grad_output, x, grad_input),
                         repeat, eps)
    _write(grad_input, ops().sinkhorn_normalize_backward(grad_output.contiguous(), x.contiguous(), repeat, eps))


# --- split-K partials and RMSNorm ------------------------------------------------------------------------------

def mhc_reduce_partials_and_rmsnorm_fwd(out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out,
                                        rms_group_size: int, rms_eps: float, n_splits: int):
    """out_mul (T, G, m3) and sqrsum (T, G) = the sums over the n_splits partials (in split order) of
    out_mul_splitted (n_splits, T, G, m3) and sqrsum_splitted (n_splits, T, G); out (T, m3) = the sum over the
    G groups of out_mul * rsqrt(sqrsum / rms_group_size + rms_eps); the three written."""
    fn = "mhc_reduce_partials_and_rmsnorm_fwd"
    _int(fn, "n_splits", n_splits, 1)
    _int(fn, "rms_group_size", rms_group_size, 1)
    eps = _float(fn, "rms_eps", rms_eps)
    _tensor(fn, "out_mul_splitted", out_mul_splitted, _F32, 4)
    s, t, g, m3 = out_mul_splitted.shape
    if s != n_splits:
        raise ValueError(f"{fn}: out_mul_splitted must have n_splits = {n_splits} partials, got {s}")
    _tensor(fn, "sqrsum_splitted", sqrsum_splitted, _F32)
    _shape(fn, "sqrsum_splitted", sqrsum_splitted, (s, t, g))
    for name, v, shape in (("out_mul", out_mul, (t, g, m3)), ("sqrsum", sqrsum, (t, g)), ("out", out, (t, m3))):
        _tensor(fn, name, v, _F32)
        _shape(fn, name, v, shape)
    o, om, sq = ops().mhc_reduce_partials_and_rmsnorm(out_mul_splitted.contiguous(), sqrsum_splitted.contiguous(),
                                                      n_splits=n_splits, group_size=rms_group_size, eps=eps)
    _write(out_mul, om)
    _write(sqrsum, sq)
    _write(out, o)


def mhc_reduce_partials_and_rmsnorm_bwd(out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad,
                                        rms_group_size: int, rms_eps: float):
    """With rstd = rsqrt(sqrsum / rms_group_size + rms_eps): out_mul_grad (T, G, m3) = out_grad * rstd and
    sqrsum_grad (T, G) = -0.5 * rstd * (the sum over m3 of out_grad * out_mul) / (sqrsum + rms_eps *
    rms_group_size); both written (the gradient of every split's partial)."""
    fn = "mhc_reduce_partials_and_rmsnorm_bwd"
    _int(fn, "rms_group_size", rms_group_size, 1)
    eps = _float(fn, "rms_eps", rms_eps)
    _tensor(fn, "out_mul", out_mul, _F32, 3)
    t, g, m3 = out_mul.shape
    for name, v, shape in (("out_grad", out_grad, (t, m3)), ("sqrsum", sqrsum, (t, g)),
                           ("out_mul_grad", out_mul_grad, (t, g, m3)), ("sqrsum_grad", sqrsum_grad, (t, g))):
        _tensor(fn, name, v, _F32)
        _shape(fn, name, v, shape)
    omg, sqg = ops().mhc_reduce_partials_and_rmsnorm_backward(out_grad.contiguous(), out_mul.contiguous(),
                                                              sqrsum.contiguous(), n_splits=1,
                                                              group_size=rms_group_size, eps=eps)
    _write(out_mul_grad, omg[0])
    _write(sqrsum_grad, sqg[0])


# --- fn and norm-weight merge ----------------------------------------------------------------------------------

def _merge_args(fn_name, fn, normw):
    _tensor(fn_name, "fn", fn, _F32, 2)
    _tensor(fn_name, "normw", normw, _F32)
    _shape(fn_name, "normw", normw, (fn.shape[1],))


def mhc_fn_normw_merge_fwd(fn, normw, out_fn):
    """out_fn = fn * normw (float32, normw (K,) broadcast over the m3 rows of fn (m3, K)); written."""
    name = "mhc_fn_normw_merge_fwd"
    _merge_args(name, fn, normw)
    _tensor(name, "out_fn", out_fn, _F32)
    _shape(name, "out_fn", out_fn, fn.shape)
    _write(out_fn, ops().mhc_fn_normw_merge(fn.contiguous(), normw.contiguous()))


def mhc_fn_normw_merge_bwd(fn, normw, out_fn_grad, fn_grad, normw_grad):
    """Adds into the given gradients, as 2.1.0's kernel does: fn_grad += out_fn_grad * normw; normw_grad +=
    the float32 sum over the m3 rows (in order, from 0) of out_fn_grad * fn."""
    name = "mhc_fn_normw_merge_bwd"
    _merge_args(name, fn, normw)
    for arg, v, shape in (("out_fn_grad", out_fn_grad, fn.shape), ("fn_grad", fn_grad, fn.shape),
                          ("normw_grad", normw_grad, normw.shape)):
        _tensor(name, arg, v, _F32)
        _shape(name, arg, v, shape)
    fa = fn_grad if fn_grad.is_contiguous() else fn_grad.contiguous()
    wa = normw_grad if normw_grad.is_contiguous() else normw_grad.contiguous()
    ops().mhc_fn_normw_merge_backward(fn.contiguous(), normw.contiguous(), out_fn_grad.contiguous(), fa, wa)
    if fa is not fn_grad:
        fn_grad.copy_(fa)
    if wa is not normw_grad:
        normw_grad.copy_(wa)


# --- compositions: the big fuse and the multilayer recompute ---------------------------------------------------
# 2.1.0's contract for both is bit-equality with the single-layer kernels called in sequence (operators-v1.md
# 7.8, 7.9); tkgen calls its generated single-layer ops in that sequence.

def mhc_pre_big_fuse_fwd(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix,
                         layer_input, rms_eps: float, mhc_pre_eps: float, mhc_sinkhorn_eps: float,
                         mhc_post_mult_value: float, sinkhorn_repeat: int, n_splits: int = 16):
    """The inference pre-block over the split-K GEMM's partials gemm_out_mul (n_splits, T, m3) and
    gemm_out_sqrsum (n_splits, T): mixes = (the partials summed in split order) * rsqrt(sqrsum / (m * D) +
    rms_eps) (one RMS group), split into pre, post and comb (mhc_pre_split_mixes_fwd), comb Sinkhorn-normalized
    (mhc_sinkhorn_fwd with mhc_sinkhorn_eps and sinkhorn_repeat) and the residual (T, m, D) bf16 mixed by pre
    (mhc_pre_apply_mix_fwd); writes post_mix (T, m), comb_mix (T, m * m) and layer_input (T, D)."""
    fn = "mhc_pre_big_fuse_fwd"
    _tensor(fn, "gemm_out_mul", gemm_out_mul, _F32, 3)      # the first argument first; the rest below
    _int(fn, "n_splits", n_splits, 1)
    _int(fn, "sinkhorn_repeat", sinkhorn_repeat, 1)
    rms_eps, pre_eps, sk_eps, pm = (_float(fn, n, v) for n, v in (
        ("rms_eps", rms_eps), ("mhc_pre_eps", mhc_pre_eps), ("mhc_sinkhorn_eps", mhc_sinkhorn_eps),
        ("mhc_post_mult_value", mhc_post_mult_value)))
    _tensor(fn, "residual", residual, _BF16)
    if residual.dim() < 3:
        raise ValueError(f"{fn}: residual must be (T, m, D), got shape {tuple(residual.shape)}")
    m, d = residual.shape[-2:]
    t, m3 = residual.numel() // (m * d), m * (m + 2)
    _tensor(fn, "gemm_out_mul", gemm_out_mul, _F32)
    _shape(fn, "gemm_out_mul", gemm_out_mul, (n_splits, t, m3))
    _tensor(fn, "gemm_out_sqrsum", gemm_out_sqrsum, _F32)
    _shape(fn, "gemm_out_sqrsum", gemm_out_sqrsum, (n_splits, t))
    _tensor(fn, "mhc_scale", mhc_scale, _F32)
    _shape(fn, "mhc_scale", mhc_scale, (3,))
    _tensor(fn, "mhc_base", mhc_base, _F32)
    _shape(fn, "mhc_base", mhc_base, (m3,))
    for name, v, shape in (("post_mix", post_mix, (t, m)), ("comb_mix", comb_mix, (t, m * m))):
        _tensor(fn, name, v, _F32)
        _numel(fn, name, v, shape)
    _tensor(fn, "layer_input", layer_input, _BF16)
    _numel(fn, "layer_input", layer_input, (t, d))
    mixes, _, _ = ops().mhc_reduce_partials_and_rmsnorm(
        gemm_out_mul.reshape(n_splits, t, 1, m3).contiguous(), gemm_out_sqrsum.reshape(n_splits, t, 1).contiguous(),
        n_splits=n_splits, group_size=m * d, eps=rms_eps)
    pre, post, comb = ops().mhc_pre_split_mixes(mixes, mhc_scale.contiguous(), mhc_base.contiguous(), m, pm,
                                                pre_eps)
    _write(post_mix, post)
    _write(comb_mix, ops().sinkhorn_normalize(comb, sinkhorn_repeat, sk_eps))
    _write(layer_input, ops().mhc_pre_apply_mix(residual.reshape(t, m, d).contiguous(), pre))


def mhc_multilayer_recompute(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list,
                             layer_input_list, residual_list) -> None:
    """Replays the residual stream through L = len(pre_mix_list) layers: R = initial_residual (..., m, D) bf16;
    for each i < P = len(layer_output_list) (P is L - 1 or L): layer_input_list[i] = mhc_pre_apply_mix(R,
    pre_mix_list[i]), then R = residual_list[i] = mhc_post(layer_output_list[i], R, post_mix_list[i],
    comb_mix_list[i]); when L > P, layer_input_list[L - 1] = mhc_pre_apply_mix(R, pre_mix_list[L - 1]).
    Writes the two output lists; returns None."""
    fn = "mhc_multilayer_recompute"
    _tensor(fn, "initial_residual", initial_residual, _BF16)       # the first argument first
    if initial_residual.dim() < 3:
        raise ValueError(f"{fn}: initial_residual must be (..., m, D), got shape {tuple(initial_residual.shape)}")
    lists = {"pre_mix_list": pre_mix_list, "layer_output_list": layer_output_list, "post_mix_list": post_mix_list,
             "comb_mix_list": comb_mix_list, "layer_input_list": layer_input_list, "residual_list": residual_list}
    for name, v in lists.items():
        if not isinstance(v, (list, tuple)):
            raise TypeError(f"{fn}: {name} must be a list of tensors, got {type(v).__name__}")
    num_layers, num_post = len(pre_mix_list), len(layer_output_list)
    if num_layers == 0:
        raise ValueError(f"{fn}: pre_mix_list must hold at least one layer")
    if len(layer_input_list) != num_layers:
        raise ValueError(f"{fn}: layer_input_list must hold {num_layers} tensors (one per pre_mix_list entry), "
                         f"got {len(layer_input_list)}")
    for name in ("post_mix_list", "comb_mix_list", "residual_list"):
        if len(lists[name]) != num_post:
            raise ValueError(f"{fn}: {name} must hold {num_post} tensors (as layer_output_list), "
                             f"got {len(lists[name])}")
    if num_post not in (num_layers - 1, num_layers):
        raise ValueError(f"{fn}: layer_output_list must hold {num_layers - 1} or {num_layers} tensors "
                         f"(len(pre_mix_list) - 1 or len(pre_mix_list)), got {num_post}")
    m, d = initial_residual.shape[-2:]
    t = initial_residual.numel() // (m * d)
    for name, dtype, shape in (("pre_mix_list", _F32, (t, m)), ("layer_output_list", _BF16, (t, d)),
                               ("post_mix_list", _F32, (t, m)), ("comb_mix_list", _F32, (t, m * m)),
                               ("layer_input_list", _BF16, (t, d)), ("residual_list", _BF16, (t, m * d))):
        for i, v in enumerate(lists[name]):
            _tensor(fn, f"{name}[{i}]", v, dtype)
            _numel(fn, f"{name}[{i}]", v, shape)
    r = initial_residual.reshape(t, m, d).contiguous()
    for i in range(num_layers):
        _write(layer_input_list[i], ops().mhc_pre_apply_mix(r, pre_mix_list[i].reshape(t, m).contiguous()))
        if i < num_post:
            r = ops().mhc_post(layer_output_list[i].reshape(t, d).contiguous(), r,
                               post_mix_list[i].reshape(t, m).contiguous(),
                               comb_mix_list[i].reshape(t, m, m).contiguous())
            _write(residual_list[i], r)

__all__ = ["expand_to_mhc_bwd", "expand_to_mhc_fwd", "mhc_head_compute_mix_bwd", "mhc_head_compute_mix_fwd",
           "mhc_multilayer_recompute", "mhc_fn_normw_merge_bwd", "mhc_fn_normw_merge_fwd",
           "mhc_reduce_partials_and_rmsnorm_bwd", "mhc_reduce_partials_and_rmsnorm_fwd", "mhc_post_bwd",
           "mhc_post_fwd", "mhc_pre_apply_mix_bwd", "mhc_pre_apply_mix_fwd", "mhc_pre_big_fuse_fwd",
           "mhc_pre_split_mixes_bwd", "mhc_pre_split_mixes_fwd", "mhc_sinkhorn_bwd", "mhc_sinkhorn_fwd"]
