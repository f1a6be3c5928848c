"""Competitor adapters for `tkgen bench`: other implementations of tkgen's operators, by name.

This file is data for the benchmark, not part of the generator. Each adapter takes the call's params and
bound sizes and returns a function of the op's input tensors that runs the competitor (its outputs are
not used). An adapter that cannot run here (package missing, no GPU) raises; the bench says why.
"""


def _tile_kernels():
    import tile_kernels  # noqa: F401  (raises ImportError where TileKernels is not installed)
    return tile_kernels


TK_FORMATS = ("e4m3", "e2m1")          # TileKernels 2.1.0 casts to these; e5m6 was removed in 2.x, e5m2 never existed


def _tk_cast_kwargs(params, dims):
    """TileKernels' keyword arguments for tkgen's group, scale and layout params (raises where it has none)."""
    if params["fmt"] not in TK_FORMATS:
        raise NotImplementedError(f"TileKernels 2.1.0 has no {params['fmt']} cast")
    group, scale = params["group"], params.get("scale", "fp32")
    if group == dims["H"]:
        raise NotImplementedError("TileKernels 2.1.0 removed one scale per row (num_per_channels == H)")
    if scale == "ue8m0_byte":
        raise NotImplementedError("TileKernels 2.1.0 has no unpacked UE8M0 scales")
    kwargs = dict(round_sf=scale in ("pow2", "ue8m0"))
    col = params.get("sf_layout") == "col"
    if scale == "ue8m0":   # TileKernels packs UE8M0 only in its column-major TMA layout
        kwargs.update(use_packed_ue8m0=True)
        col = True
    if col:
        kwargs.update(use_tma_aligned_col_major_sf=True)
    return kwargs


def tk_per_token_cast(params, dims):
    tk = _tile_kernels()
    kwargs = _tk_cast_kwargs(params, dims)
    return lambda x: tk.quant.per_token_cast(x, params["fmt"], params["group"], **kwargs)


def tk_per_token_cast_with_sf_only(params, dims):
    tk = _tile_kernels()
    kwargs = _tk_cast_kwargs(params, dims)
    return lambda x: tk.quant.per_token_cast_with_sf_only(x, params["fmt"], params["group"], **kwargs)


def tk_per_token_cast_with_precomputed_sf(params, dims):
    tk = _tile_kernels()
    kwargs = _tk_cast_kwargs({**params, "scale": "fp32"}, dims)
    return lambda x, sf: tk.quant.per_token_cast_with_precomputed_sf(x, params["fmt"], params["group"], sf, **kwargs)


def tk_cast_back(params, dims):
    """TileKernels dequantizes to bf16 or fp32 from (q, sf) with a (1, block) scale block. Its packed UE8M0
    input is column-major (int32 with stride(0) == 1); tkgen's is row-major, so that case raises."""
    tk = _tile_kernels()
    _tk_cast_kwargs({"fmt": params["fmt"], "group": params["block"], "scale": params["scale"]}, dims)
    if params["scale"] != "fp32":
        raise NotImplementedError("TileKernels reads packed UE8M0 scales only column-major")
    return lambda q, sf: tk.quant.cast_back((q, sf), params["out"], (1, params["block"]))


def tk_per_token_cast_and_cast_back(params, dims):
    """In place in TileKernels (x keeps its dtype): the adapter times the in-place kernel on the input."""
    tk = _tile_kernels()
    kwargs = _tk_cast_kwargs(params, dims)
    kwargs.pop("use_tma_aligned_col_major_sf", None)
    return lambda x: tk.quant.per_token_cast_and_cast_back(x, params["fmt"], params["group"], **kwargs)


def tk_topk_gate(params, dims):
    tk = _tile_kernels()
    return lambda scores: tk.moe.topk_gate(scores, params["k"])


def _tk_scale_kwargs(scale):
    kwargs = dict(round_sf=scale in ("pow2", "ue8m0"))
    if scale == "ue8m0":   # TileKernels packs UE8M0 only in its column-major TMA layout
        kwargs.update(use_packed_ue8m0=True, use_tma_aligned_col_major_sf=True)
    return kwargs


def _tk_whole_blocks(dims, rows_name, cols_name="H"):
    if dims[rows_name] % 128 or dims[cols_name] % 128:
        raise NotImplementedError(f"TileKernels 2.1.0 needs {rows_name} % 128 == 0 and {cols_name} % 128 == 0")


def _tk_per_block(function):
    """An adapter for TileKernels' per-block cast `function` (the full cast or its scales-only mode)."""
    def adapter(params, dims):
        fn = getattr(_tile_kernels().quant, function)
        _tk_whole_blocks(dims, "T")
        block = (params["block_rows"], params["block_cols"])
        kwargs = _tk_scale_kwargs(params["scale"])
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
    """TileKernels re-blocks (q, sf) given as a pair, with float32 input scales here: it reads packed UE8M0
    input scales only column-major (tkgen's are row-major) and has no unpacked UE8M0 bytes. Its packed
    UE8M0 output is column-major, as tkgen's with sf_layout="col"."""
    tk = _tile_kernels()
    _tk_whole_blocks(dims, "T")
    if params["in_scale"] != "fp32":
        raise NotImplementedError("TileKernels reads packed UE8M0 input scales only column-major")
    if params["scale"] == "ue8m0_byte":
        raise NotImplementedError("TileKernels 2.1.0 has no unpacked UE8M0 scales")
    kwargs = {}
    if params["scale"] == "ue8m0":
        kwargs.update(use_packed_ue8m0=True, use_tma_aligned_col_major_sf=True)
    elif params["sf_layout"] == "col":
        kwargs.update(use_tma_aligned_col_major_sf=True)
    x_block, out_block = (1, params["in_cols"]), (params["block_rows"], params["block_cols"])
    return lambda q, sf: tk.quant.per_block_cast_lossless((q, sf), "e4m3", x_block, out_block, **kwargs)


def tk_per_channel_cast(params, dims):
    tk = _tile_kernels()
    if params["transpose"]:
        raise NotImplementedError("TileKernels 2.1.0 removed per_channel_cast_and_transpose")
    _tk_whole_blocks(dims, "T")
    scale = params["scale"]
    # TileKernels' packed UE8M0 for per-channel scales packs four row groups per word (tkgen: four channels)
    kwargs = dict(round_sf=scale in ("pow2", "ue8m0"), use_packed_ue8m0=scale == "ue8m0")
    return lambda x: tk.quant.per_channel_cast(x, params["fmt"], params["group_tokens"], **kwargs)


def tk_batched_transpose(params, dims):
    tk = _tile_kernels()
    transpose = getattr(tk, "transpose", None)      # TileKernels 1.x; 2.1.0 removed the subpackage
    if transpose is None:
        raise NotImplementedError("TileKernels 2.1.0 has no transpose ops (removed after 1.x)")
    if dims["M"] % 64 or dims["N"] % 64:
        raise NotImplementedError("TileKernels' batched_transpose needs M % 64 == 0 and N % 64 == 0")
    return lambda x: transpose.batched_transpose(x)
def _tk_swiglu_moe(params, pos_to_token_topk, pos_to_expert):
    """TileKernels 2.1.0's SwiGLU options: per-row weights (already gathered) times routed_scaling_factor, a
    compile-time clamp; it has no gather at positions and marks padding by a psum layout, not per row."""
    if pos_to_token_topk is not None or pos_to_expert is not None:
        raise NotImplementedError("TileKernels 2.1.0 takes gathered weights and a psum layout, not positions")
    rsf = params.get("routed_scaling_factor", 1.0)
    return dict(routed_scaling_factor=None if rsf == 1.0 else rsf, clamp_value=params.get("clamp"))


def tk_swiglu_forward(params, dims):
    tk = _tile_kernels()

    def run(x, weights=None, pos_to_token_topk=None, topk_weights=None, pos_to_expert=None):
        return tk.quant.swiglu_forward(x, params["fmt"], topk_weights=weights,
                                       **_tk_swiglu_moe(params, pos_to_token_topk, pos_to_expert))
    return run


def tk_swiglu_forward_and_per_token_cast(params, dims):
    tk = _tile_kernels()
    if params["group"] not in (32, 128):
        raise NotImplementedError("TileKernels 2.1.0 casts SwiGLU outputs in groups of 32 or 128 only")
    kwargs = _tk_scale_kwargs(params["scale"])

    def run(x, weights=None, pos_to_token_topk=None, topk_weights=None, pos_to_expert=None):
        return tk.quant.swiglu_forward_and_per_token_cast(
            x, params["fmt"], params["group"], topk_weights=weights, **kwargs,
            **_tk_swiglu_moe(params, pos_to_token_topk, pos_to_expert))
    return run


def tk_swiglu_backward(params, dims):
    tk = _tile_kernels()

    def run(x, grad_out, weights=None, pos_to_token_topk=None, topk_weights=None, pos_to_expert=None):
        # TileKernels returns the weight gradient only with weights; its x_grad dtype is `fmt`
        fmt = "bf16" if x.dtype.itemsize == 2 else "fp32"
        return tk.quant.swiglu_backward(x, grad_out, fmt, topk_weights=weights,
                                        **_tk_swiglu_moe(params, pos_to_token_topk, pos_to_expert))
    return run


def tk_swiglu_backward_and_per_token_cast(params, dims):
    tk = _tile_kernels()
    if dims["H"] % 64:
        raise NotImplementedError("TileKernels 2.1.0's SwiGLU backward needs H % 64 == 0")
    scale = params["scale"]
    kwargs = dict(round_sf=scale in ("pow2", "ue8m0"), use_packed_ue8m0=scale == "ue8m0",
                  # TileKernels packs UE8M0 only in its column-major TMA layout
                  use_tma_aligned_col_major_sf=params["sf_layout"] == "col" or scale == "ue8m0",
                  clamp_value=params["clamp"], do_recompute=params["recompute"])
    rsf = params["routed_scaling_factor"]

    def run(q, sf, act_x_grad, weights=None):
        # TileKernels takes the routed scaling factor only with weights (tkgen: rsf alone without them)
        if weights is None and rsf != 1.0:
            raise NotImplementedError("TileKernels applies routed_scaling_factor only with topk_weights")
        return tk.quant.swiglu_backward_and_per_token_cast(
            (q, sf), act_x_grad, fmt="e4m3", num_per_channels=params["group"], topk_weights=weights,
            routed_scaling_factor=rsf if weights is not None else None, **kwargs)
    return run


def tk_rmsnorm_forward(params, dims):
    tk = _tile_kernels()
    return lambda x, weight=None, residual=None: tk.quant.norm_forward(
        x, weight, params["eps"], residual=residual, out_scale=params["out_scale"], with_rstd=True)


def tk_rmsnorm_forward_and_per_token_cast(params, dims):
    tk = _tile_kernels()
    if params["group"] != 32:
        raise NotImplementedError("TileKernels 2.1.0 casts normalized rows in groups of 32 only")
    kwargs = _tk_scale_kwargs(params["scale"])
    return lambda x, weight=None, residual=None: tk.quant.norm_forward_and_per_token_cast(
        x, weight, params["eps"], params["fmt"], params["group"], residual=residual, out_scale=params["out_scale"],
        with_rstd=True, **kwargs)


def tk_rmsnorm_backward(params, dims):
    tk = _tile_kernels()
    return lambda grad_out, x, rstd, weight=None, grad_residual=None: tk.quant.norm_backward(
        grad_out, x, weight, rstd, residual_out_grad=grad_residual, out_scale=params["out_scale"])


ADAPTERS = {
    "tilekernels": {
        "per_token_cast": tk_per_token_cast,
        "per_token_cast_with_sf_only": tk_per_token_cast_with_sf_only,
        "per_token_cast_with_precomputed_sf": tk_per_token_cast_with_precomputed_sf,
        "cast_back": tk_cast_back,
        "per_token_cast_and_cast_back": tk_per_token_cast_and_cast_back,
        "topk_gate": tk_topk_gate,
        "per_block_cast": tk_per_block_cast,
        "per_block_cast_with_sf_only": tk_per_block_cast_with_sf_only,
        "per_block_cast_with_precomputed_sf": tk_per_block_cast_with_precomputed_sf,
        "per_block_cast_lossless": tk_per_block_cast_lossless,
        "per_channel_cast": tk_per_channel_cast,
        "batched_transpose": tk_batched_transpose,
        "swiglu_forward": tk_swiglu_forward,
        "swiglu_forward_and_per_token_cast": tk_swiglu_forward_and_per_token_cast,
        "swiglu_backward": tk_swiglu_backward,
        "swiglu_backward_and_per_token_cast": tk_swiglu_backward_and_per_token_cast,
        "rmsnorm_forward": tk_rmsnorm_forward,
        "rmsnorm_forward_and_per_token_cast": tk_rmsnorm_forward_and_per_token_cast,
        "rmsnorm_backward": tk_rmsnorm_backward,
    },
}
