"""Competitor adapters for `tkgen bench`: other implementations of tkgen's operators, by name.

This file is data for the benchmark, not part of the generator. Each adapter takes the call's params and
bound sizes and returns a function of the op's input tensors that runs the competitor (its outputs are
not used). An adapter that cannot run here (package missing, no GPU) raises; the bench says why.
"""
import torch


def _tile_kernels():
    import tile_kernels  # noqa: F401  (raises ImportError where TileKernels is not installed)
    return tile_kernels


TK_FORMATS = ("e4m3", "e2m1")          # TileKernels 2.1.0 casts to these; e5m6 was removed in 2.x, e5m2 never existed


def _need(ok, why):
    """Raise before the call where TileKernels has no kernel for the case (rather than assert on the GPU)."""
    if not ok:
        raise NotImplementedError(f"TileKernels 2.1.0 {why}")


def _tk_sf_kwargs(scale, layout="row"):
    """TileKernels' keyword arguments for tkgen's scale format and layout. Its packed UE8M0 is tkgen's (four groups
    per int32, group j in byte j % 4), row-major or in the column-major TMA layout; it has no unpacked bytes."""
    _need(scale != "ue8m0_byte", "has no unpacked UE8M0 scales")
    kwargs = dict(round_sf=scale in ("pow2", "ue8m0"), use_packed_ue8m0=scale == "ue8m0",
                  use_tma_aligned_col_major_sf=layout == "col")
    return {**kwargs, "use_e4m3_sf": True} if scale == "e4m3" else kwargs


def _tk_per_token(params, dims):
    _need(params["fmt"] in TK_FORMATS, f"has no {params['fmt']} cast")
    _need(params["group"] in (16, 32, 64, 128), "casts per token in groups of 16, 32, 64 or 128 (no scale per row)")
    _need(dims["H"] % 64 == 0, "casts per token only with H % 64 == 0")


def tk_per_token_cast(params, dims):
    tk = _tile_kernels()
    _tk_per_token(params, dims)
    kwargs = _tk_sf_kwargs(params["scale"], params.get("sf_layout", "row"))
    return lambda x: tk.quant.per_token_cast(x, params["fmt"], params["group"], **kwargs)


def tk_per_token_cast_with_sf_only(params, dims):
    tk = _tile_kernels()
    _tk_per_token(params, dims)
    kwargs = _tk_sf_kwargs(params["scale"], params.get("sf_layout", "row"))
    return lambda x: tk.quant.per_token_cast_with_sf_only(x, params["fmt"], params["group"], **kwargs)


def tk_per_token_cast_with_precomputed_sf(params, dims):
    tk = _tile_kernels()
    _tk_per_token(params, dims)
    return lambda x, sf: tk.quant.per_token_cast_with_precomputed_sf(x, params["fmt"], params["group"], sf)


def tk_cast_back(params, dims):
    """TileKernels dequantizes (q, sf) with a (block_rows, block) scale block, from float32 or packed UE8M0 scales
    (int32, row-major as tkgen's or column-major)."""
    tk = _tile_kernels()
    _need(params["fmt"] in TK_FORMATS, f"has no {params['fmt']} cast back")
    _need(params["scale"] != "ue8m0_byte", "has no unpacked UE8M0 scales")
    _need(dims["H"] % 64 == 0, "casts back only with H % 64 == 0")
    block = (params.get("block_rows", 1), params["block"])
    return lambda q, sf: tk.quant.cast_back((q, sf), params["out"], block)


def tk_per_token_cast_and_cast_back(params, dims):
    """In place in TileKernels (x keeps its dtype): the adapter times the in-place kernel on the input."""
    tk = _tile_kernels()
    _tk_per_token(params, dims)
    out = {"bf16": torch.bfloat16, "fp32": torch.float32}[params["out"]]

    def run(x):
        _need(x.dtype == out, f"casts back in place, into x's dtype {x.dtype}, not into {params['out']}")
        return tk.quant.per_token_cast_and_cast_back(x, params["fmt"], params["group"],
                                                     round_sf=params["scale"] == "pow2",
                                                     use_e4m3_sf=params["scale"] == "e4m3")
    return run


def tk_topk_gate(params, dims):
    tk = _tile_kernels()
    _need(params["k"] <= 32, "selects at most 32 experts per token")
    return lambda scores: tk.moe.topk_gate(scores, params["k"])


def _tk_whole_blocks(dims, rows_name, cols_name="H"):
    _need(dims[rows_name] % 128 == 0 and dims[cols_name] % 128 == 0,
          f"needs {rows_name} % 128 == 0 and {cols_name} % 128 == 0")


def _tk_per_block(function):
    """An adapter for TileKernels' per-block cast `function` (the full cast or its scales-only mode)."""
    def adapter(params, dims):
        fn = getattr(_tile_kernels().quant, function)
        _tk_whole_blocks(dims, "T")
        block = (params["block_rows"], params["block_cols"])
        kwargs = _tk_sf_kwargs(params["scale"])
        return lambda x: fn(x, params["fmt"], block, **kwargs)
    return adapter


tk_per_block_cast = _tk_per_block("per_block_cast")
tk_per_block_cast_with_sf_only = _tk_per_block("per_block_cast_with_sf_only")


def tk_per_block_cast_with_precomputed_sf(params, dims):
    tk = _tile_kernels()
    _tk_whole_blocks(dims, "T")
    block = (params["block_rows"], params["block_cols"])
    return lambda x, sf: tk.quant.per_block_cast_with_precomputed_sf(x, params["fmt"], block, sf)


def tk_per_block_cast_lossless(params, dims):
    """TileKernels re-blocks (q, sf) given as a pair, from float32 or packed UE8M0 input scales. Its kernel
    device-asserts (a trap that ends the process's CUDA context) that each input exponent is within 11 of its
    output block's largest; the bench's random scales are not (float32 ones even have signs), so it is timed on
    unit scales, one buffer per input set (the kernel's time does not depend on the values)."""
    tk = _tile_kernels()
    _tk_whole_blocks(dims, "T")
    _need(params["in_scale"] != "ue8m0_byte", "has no unpacked UE8M0 scales")
    kwargs = _tk_sf_kwargs(params["scale"], params["sf_layout"])
    x_block, out_block = (1, params["in_cols"]), (params["block_rows"], params["block_cols"])
    one = 0x7F7F7F7F if params["in_scale"] == "ue8m0" else 1.0      # 2^0: four exponent bytes 127, or float32
    unit = {}

    def run(q, sf):
        if sf.data_ptr() not in unit:
            unit[sf.data_ptr()] = torch.full_like(sf, one)
        return tk.quant.per_block_cast_lossless((q, unit[sf.data_ptr()]), "e4m3", x_block, out_block, **kwargs)
    return run


def tk_per_channel_cast(params, dims):
    tk = _tile_kernels()
    _need(not params["transpose"], "removed per_channel_cast_and_transpose")
    _tk_whole_blocks(dims, "T")
    scale = params["scale"]
    # TileKernels' packed UE8M0 for per-channel scales packs four row groups per word (tkgen: four channels)
    kwargs = dict(round_sf=scale in ("pow2", "ue8m0"), use_packed_ue8m0=scale == "ue8m0")
    return lambda x: tk.quant.per_channel_cast(x, params["fmt"], params["group_tokens"], **kwargs)


def tk_per_channel_cast_from_fp8(params, dims):
    """TileKernels 2.1.0's per_channel_cast of a (q, sf) input; sf row-major as tkgen's (float32, e4m3 or UE8M0
    words: TileKernels tells them by dtype), its col-pack for ue8m0 out_sf."""
    tk = _tile_kernels()
    _tk_whole_blocks(dims, "T")
    scale = params["scale"]
    kwargs = dict(round_sf=scale in ("pow2", "ue8m0"), use_packed_ue8m0=scale == "ue8m0")
    in_group = params["in_group"]

    def run(q, sf=None):
        _need(sf is not None, "rescales a quantized input only with its scales")
        # tkgen stores e4m3 codes as uint8: TileKernels tells a quantized input by its float8 dtype
        q = q.view(torch.float8_e4m3fn) if q.dtype == torch.uint8 else q
        return tk.quant.per_channel_cast((q, sf), params["fmt"], params["group_tokens"], num_per_channels=in_group,
                                         **kwargs)
    return run


def _tk_transpose():
    transpose = getattr(_tile_kernels(), "transpose", None)      # TileKernels 1.x; 2.1.0 removed the subpackage
    if transpose is None:
        raise NotImplementedError("TileKernels 2.1.0 has no transpose ops (removed after 1.x)")
    return transpose


def tk_transpose(params, dims):
    return _tk_transpose().transpose


def tk_batched_transpose(params, dims):
    transpose = _tk_transpose()
    if dims["M"] % 64 or dims["N"] % 64:
        raise NotImplementedError("TileKernels' batched_transpose needs M % 64 == 0 and N % 64 == 0")
    return lambda x: transpose.batched_transpose(x)


def tk_cast(params, dims):
    """TileKernels 2.1.0's quant.cast in its round-to-nearest-even mode (x of any shape; tkgen's is flat)."""
    tk = _tile_kernels()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}[params["dtype"]]
    return lambda x: tk.quant.cast(x, dtype)


def _tk_swiglu_moe(params, weights, pos_to_token_topk, pos_to_expert):
    """TileKernels 2.1.0's SwiGLU options: per-row weights (already gathered) times routed_scaling_factor (only
    with weights), a compile-time clamp; it has no gather at positions and marks padding by a psum layout."""
    _need(pos_to_token_topk is None and pos_to_expert is None,
          "takes gathered weights and a psum layout, not positions")
    rsf = params.get("routed_scaling_factor", 1.0)
    _need(rsf == 1.0 or weights is not None, "applies routed_scaling_factor only with topk_weights")
    return dict(topk_weights=weights, routed_scaling_factor=None if rsf == 1.0 else rsf,
                clamp_value=params.get("clamp"))


def _tk_clamped_count(params, x):
    """With a clamp, tkgen counts the clamped values: TileKernels does when given its int64[4] counter."""
    return None if params.get("clamp") is None else torch.zeros(4, dtype=torch.int64, device=x.device)


def tk_swiglu_forward(params, dims):
    tk = _tile_kernels()
    _need(dims["H"] % 64 == 0, "needs H % 64 == 0 for SwiGLU")

    def run(x, weights=None, pos_to_token_topk=None, topk_weights=None, pos_to_expert=None):
        moe = _tk_swiglu_moe(params, weights, pos_to_token_topk, pos_to_expert)
        return tk.quant.swiglu_forward(x, params["fmt"], clamped_count=_tk_clamped_count(params, x), **moe)
    return run


def tk_swiglu_forward_and_per_token_cast(params, dims):
    tk = _tile_kernels()
    _need(params["group"] in (32, 128), "casts SwiGLU outputs in groups of 32 or 128 only")
    _need(dims["H"] % 64 == 0, "needs H % 64 == 0 for SwiGLU")
    kwargs = _tk_sf_kwargs(params["scale"])

    def run(x, weights=None, pos_to_token_topk=None, topk_weights=None, pos_to_expert=None):
        moe = _tk_swiglu_moe(params, weights, pos_to_token_topk, pos_to_expert)
        return tk.quant.swiglu_forward_and_per_token_cast(
            x, params["fmt"], params["group"], clamped_count=_tk_clamped_count(params, x), **kwargs, **moe)
    return run


def tk_swiglu_backward(params, dims):
    tk = _tile_kernels()
    _need(dims["H"] % 64 == 0, "needs H % 64 == 0 for SwiGLU backward")

    def run(x, grad_out, weights=None, pos_to_token_topk=None, topk_weights=None, pos_to_expert=None):
        # TileKernels returns the weight gradient only with weights; its x_grad dtype is `fmt`
        fmt = "bf16" if x.dtype == torch.bfloat16 else "fp32"
        moe = _tk_swiglu_moe(params, weights, pos_to_token_topk, pos_to_expert)
        return tk.quant.swiglu_backward(x, grad_out, fmt, **moe)
    return run


def tk_swiglu_backward_and_per_token_cast(params, dims):
    tk = _tile_kernels()
    _need(dims["H"] % 64 == 0, "needs H % 64 == 0 for SwiGLU backward")
    kwargs = dict(_tk_sf_kwargs(params["scale"], params["sf_layout"]), do_recompute=params["recompute"])

    def run(q, sf, act_x_grad, weights=None, pos_to_expert=None):
        q = q.view(torch.float8_e4m3fn) if q.dtype == torch.uint8 else q
        return tk.quant.swiglu_backward_and_per_token_cast(
            (q, sf), act_x_grad, "e4m3", params["group"], **kwargs,
            **_tk_swiglu_moe(params, weights, None, pos_to_expert))
    return run


def _tk_norm_rows(dims, multiple):
    _need(dims["H"] % multiple == 0 and dims["H"] <= 8192,
          f"normalizes rows of at most 8192 channels, a multiple of {multiple}")


def tk_rmsnorm_forward(params, dims):
    tk = _tile_kernels()
    _tk_norm_rows(dims, 16)
    return lambda x, weight=None, residual=None: tk.quant.norm_forward(
        x, weight, params["eps"], residual=residual, out_scale=params["out_scale"], with_rstd=True)


def tk_rmsnorm_forward_and_per_token_cast(params, dims):
    tk = _tile_kernels()
    _need(params["group"] == 32, "casts normalized rows in groups of 32 only")
    _tk_norm_rows(dims, 32)
    kwargs = _tk_sf_kwargs(params["scale"])
    return lambda x, weight=None, residual=None: tk.quant.norm_forward_and_per_token_cast(
        x, weight, params["eps"], params["fmt"], params["group"], residual=residual, out_scale=params["out_scale"],
        with_rstd=True, **kwargs)


def tk_rmsnorm_backward(params, dims):
    tk = _tile_kernels()
    _tk_norm_rows(dims, 32)
    return lambda grad_out, x, rstd, weight=None, grad_residual=None: tk.quant.norm_backward(
        grad_out, x, weight, rstd, residual_out_grad=grad_residual, out_scale=params["out_scale"])


# -- plain PyTorch: what a user writes without a kernel library (index_select, index_copy, a weighted sum) ----
def plain_expand_to_fused(params, dims):
    def run(x, token_topk_to_pos, pos_to_expert):
        T, K = token_topk_to_pos.shape
        pos = token_topk_to_pos.reshape(-1).long()
        pos = torch.where(pos >= 0, pos, pos_to_expert.numel())          # unrouted pairs to a spare row
        out = torch.zeros(pos_to_expert.numel() + 1, x.shape[1], dtype=x.dtype, device=x.device)
        out.index_copy_(0, pos, x.repeat_interleave(K, dim=0))
        return out[:-1]
    return run


def plain_reduce_fused(params, dims):
    def run(x, topk_weights, x_sf, sf, token_topk_to_pos):
        T, K = token_topk_to_pos.shape
        pos = token_topk_to_pos.long()
        ok = (pos >= 0) & (pos < x.shape[0])
        at = torch.where(ok, pos, 0)
        rows = x.index_select(0, at.reshape(-1)).view(T, K, -1).float()
        w = ok.float() if topk_weights is None else torch.where(ok, topk_weights, 0.0)
        if x_sf is not None:
            w = w * x_sf[at]
        out = (rows * w[..., None]).sum(1)
        return out if sf is None else out * sf
    return run


def plain_expand_to_fused_with_sf(params, dims):
    expand = plain_expand_to_fused(params, dims)
    return lambda x, x_sf, token_topk_to_pos, pos_to_expert: (expand(x, token_topk_to_pos, pos_to_expert),
                                                              expand(x_sf, token_topk_to_pos, pos_to_expert))


PLAIN = {"expand_to_fused": plain_expand_to_fused, "expand_to_fused_with_sf": plain_expand_to_fused_with_sf,
         "reduce_fused": plain_reduce_fused}


def _compiled(adapter):
    def make(params, dims):
        return torch.compile(adapter(params, dims), dynamic=False)
    return make


def tk_moe_topk_gate_forward(params, dims):
    tk = _tile_kernels()
    k, slots = params["num_topk"], params["num_slots"]

    def run(logits, mask=None, bias=None, image_bias=None, image_token_mask=None, fix_routing_mask=None,
            unmapped_topk_idx=None, to_physical_map=None, logical_count=None):
        as_bool = lambda t: None if t is None else t.bool()  # noqa: E731  (tkgen's masks are int32)
        return tk.moe.moe_topk_gate_forward(
            logits, k, slots > k, slots - k, params["routed_scaling_factor"], params.get("ep_rank", 0),
            mask=as_bool(mask), bias=bias, image_bias=image_bias, image_token_mask=as_bool(image_token_mask),
            fix_routing_mask=as_bool(fix_routing_mask), to_physical_map=to_physical_map,
            logical_count=logical_count, unmapped_topk_idx=unmapped_topk_idx)
    return run


def tk_moe_topk_gate_backward(params, dims):
    tk = _tile_kernels()
    def run(scores, topk_idx, topk_weights, grad, grad_scores_sum=None, mask=None):
        return tk.moe.moe_topk_gate_backward(scores, topk_idx, topk_weights, grad, params["routed_scaling_factor"],
                                             mask=None if mask is None else mask.bool(),
                                             grad_scores_sum=grad_scores_sum)
    return run


def tk_apply_rotary(params, dims):
    tk = _tile_kernels()
    inter, conj = params.get("interleaved", False), params.get("conjugate", False)
    rows = {}      # positions drawn past the cache (tkgen leaves those rows) clamped once per input, not timed

    def run(query, positions, cos_sin_cache):
        key = positions.data_ptr()
        if key not in rows:
            rows[key] = positions.clamp(0, cos_sin_cache.shape[0] - 1)
        tk.transform.apply_rotary(query, cos_sin_cache, positions=rows[key], interleaved=inter, conjugate=conj)
    return run


def tk_normalize_weight(params, dims):
    tk = _tile_kernels()
    return lambda w: tk.moe.normalize_weight(w)


_PACKED = {}


def _tk_kv(k, v):
    """TileKernels 2.1.0 takes k and v packed as kv [T, hc + 1, D]: packed once per input set, outside the
    timed call."""
    key = (k.data_ptr(), v.data_ptr())
    if key not in _PACKED:
        _PACKED[key] = torch.cat([k, v[:, None]], dim=1).contiguous()
    return _PACKED[key]


def _tk_mask(mask):
    return None if mask is None else mask.bool()


def tk_engram_gate_fwd(params, dims):
    tk = _tile_kernels()
    return lambda x, k, v, w, mask=None: tk.engram.engram_gate_fwd(
        x, _tk_kv(k, v), w, params["eps"], params["clamp_value"], params["save_for_backward"], _tk_mask(mask))


def tk_engram_gate_bwd(params, dims):
    tk = _tile_kernels()
    return lambda go, x, k, v, w, dot, gate, rstd_x, rstd_k, mask=None: tk.engram.engram_gate_bwd(
        go, x, _tk_kv(k, v), w, dot, gate, rstd_x, rstd_k, params["clamp_value"], _tk_mask(mask))


def tk_engram_hash(params, dims):
    tk = _tile_kernels()
    return lambda ids, mult, vocab, offsets, mask=None: tk.engram.engram_hash(
        ids, mult, vocab, offsets, None if mask is None else mask.bool())


def tk_engram_sinkhorn_step(params, dims):
    """TileKernels' step writes 3 x S column partials and leaves their reduce to a second call; tkgen's op
    runs both kernels (its shares added in block order), so the timed TileKernels call includes the reduce."""
    tk = _tile_kernels()
    col_sumsq = {}

    def run(matrix, row_scale, col_scale):
        norm, partial = tk.engram.engram_sinkhorn_step(matrix, row_scale, col_scale, params["eps"])
        out = col_sumsq.setdefault(matrix.shape[1], matrix.new_empty(matrix.shape[1]))
        tk.engram.engram_sinkhorn_step_reduce(partial, out)
        return norm, out
    return run


def tk_engram_sinkhorn_step_reduce(params, dims):
    tk = _tile_kernels()
    return lambda partial, col_sumsq: tk.engram.engram_sinkhorn_step_reduce(partial, col_sumsq)


def tk_engram_sinkhorn_finalize(params, dims):
    tk = _tile_kernels()
    return lambda matrix, row_scale, col_scale: tk.engram.engram_sinkhorn_finalize(
        matrix, row_scale, col_scale, params["eps"], params["alpha"])


def tk_engram_sinkhorn_momentum_update(params, dims):
    tk = _tile_kernels()
    return lambda grad, buf: tk.engram.engram_sinkhorn_momentum_update(grad, buf, params["beta1"],
                                                                       params["nesterov"])


def tk_fused_weight(params, dims):
    tk = _tile_kernels()
    return lambda wh, we: tk.engram.fused_weight(wh, we)


def tk_grad_w_reduce(params, dims):
    tk = _tile_kernels()
    return lambda partial, wh, we, gwh, gwe: tk.engram.grad_w_reduce(partial, wh, we, gwh, gwe)


def _tk_mhc():
    """TileKernels 2.1.0's mHC kernels (tile_kernels.mhc): destination-passing, outputs preallocated."""
    return _tile_kernels().mhc


def tk_expand_to_mhc(params, dims):
    mhc = _tk_mhc()

    def run(x):
        o = torch.empty(x.shape[0], params["mhc_mult"], x.shape[1], dtype=x.dtype, device=x.device)
        mhc.expand_to_mhc_fwd(x, o)
        return o
    return run


def tk_mhc_pre_apply_mix(params, dims):
    mhc = _tk_mhc()

    def run(x, mix):
        o = torch.empty(x.shape[0], x.shape[2], dtype=x.dtype, device=x.device)
        mhc.mhc_pre_apply_mix_fwd(x, mix, o)
        return o
    return run


def tk_mhc_post(params, dims):
    """TileKernels takes (n0, n1, ...) leading dims and post as (..., m, 1)."""
    mhc = _tk_mhc()
    return lambda x, residual, post, comb: mhc.mhc_post_fwd(x[None], residual[None], post[None, :, :, None], comb[None])


def tk_mhc_pre_split_mixes(params, dims):
    mhc = _tk_mhc()
    m = params["mhc_mult"]

    def run(mixes, scale, base):
        t = mixes.shape[0]
        pre, post = (torch.empty(t, m, dtype=torch.float32, device=mixes.device) for _ in range(2))
        comb = torch.empty(t, m, m, dtype=torch.float32, device=mixes.device)
        mhc.mhc_pre_split_mixes_fwd(mixes, scale, base, pre, post, comb, params["mhc_post_mult_value"],
                                    params["mhc_pre_eps"])
        return pre, post, comb
    return run


def tk_mhc_head_compute_mix(params, dims):
    mhc = _tk_mhc()

    def run(mix, scale, base):
        out = torch.empty_like(mix)
        mhc.mhc_head_compute_mix_fwd(mix, scale, base, out, params["mhc_pre_eps"])
        return out
    return run


def tk_sinkhorn_normalize(params, dims):
    mhc = _tk_mhc()

    def run(x):
        out = torch.empty_like(x)
        mhc.mhc_sinkhorn_fwd(x, out, params["repeat"], params["eps"])
        return out
    return run


ADAPTERS = {
    "plain": PLAIN,
    "plain_compile": {name: _compiled(a) for name, a in PLAIN.items()},
    "tilekernels": {
        "per_token_cast": tk_per_token_cast,
        "per_token_cast_with_sf_only": tk_per_token_cast_with_sf_only,
        "per_token_cast_with_precomputed_sf": tk_per_token_cast_with_precomputed_sf,
        "cast_back": tk_cast_back,
        "per_token_cast_and_cast_back": tk_per_token_cast_and_cast_back,
        "topk_gate": tk_topk_gate,
        "moe_topk_gate_forward": tk_moe_topk_gate_forward,
        "moe_topk_gate_backward": tk_moe_topk_gate_backward,
        "normalize_weight": tk_normalize_weight,
        "engram_gate_fwd": tk_engram_gate_fwd,
        "engram_gate_bwd": tk_engram_gate_bwd,
        "engram_hash": tk_engram_hash,
        "engram_sinkhorn_step": tk_engram_sinkhorn_step,
        "engram_sinkhorn_step_reduce": tk_engram_sinkhorn_step_reduce,
        "engram_sinkhorn_finalize": tk_engram_sinkhorn_finalize,
        "engram_sinkhorn_momentum_update": tk_engram_sinkhorn_momentum_update,
        "fused_weight": tk_fused_weight,
        "grad_w_reduce": tk_grad_w_reduce,
        "per_block_cast": tk_per_block_cast,
        "per_block_cast_with_sf_only": tk_per_block_cast_with_sf_only,
        "per_block_cast_with_precomputed_sf": tk_per_block_cast_with_precomputed_sf,
        "per_block_cast_lossless": tk_per_block_cast_lossless,
        "per_channel_cast": tk_per_channel_cast,
        "batched_transpose": tk_batched_transpose,
        "elementwise_cast": tk_cast,
        "transpose_2d": tk_transpose,
        "per_channel_cast_from_fp8": tk_per_channel_cast_from_fp8,
        "swiglu_forward": tk_swiglu_forward,
        "swiglu_forward_and_per_token_cast": tk_swiglu_forward_and_per_token_cast,
        "swiglu_backward": tk_swiglu_backward,
        "swiglu_backward_and_per_token_cast": tk_swiglu_backward_and_per_token_cast,
        "rmsnorm_forward": tk_rmsnorm_forward,
        "rmsnorm_forward_and_per_token_cast": tk_rmsnorm_forward_and_per_token_cast,
        "rmsnorm_backward": tk_rmsnorm_backward,
        "expand_to_mhc": tk_expand_to_mhc,
        "mhc_pre_apply_mix": tk_mhc_pre_apply_mix,
        "mhc_post": tk_mhc_post,
        "mhc_pre_split_mixes": tk_mhc_pre_split_mixes,
        "mhc_head_compute_mix": tk_mhc_head_compute_mix,
        "sinkhorn_normalize": tk_sinkhorn_normalize,
        "apply_rotary": tk_apply_rotary,
    },
}
