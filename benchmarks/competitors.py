"""Competitor adapters for `tkgen bench`: other implementations of tkgen's operators, by name.

This file is data for the benchmark, not part of the generator. Each adapter takes the call's params and
bound sizes and returns a function of the op's input tensors that runs the competitor (its outputs are
not used). An adapter that cannot run here (package missing, no GPU) raises; the bench says why.
"""


def _tile_kernels():
    import tile_kernels  # noqa: F401  (raises ImportError where TileKernels is not installed)
    return tile_kernels


def tk_per_token_cast(params, dims):
    tk = _tile_kernels()
    group, scale = params["group"], params["scale"]
    if group == dims["H"]:
        raise NotImplementedError("TileKernels 2.1.0 removed one scale per row (num_per_channels == H)")
    kwargs = dict(round_sf=scale in ("pow2", "ue8m0"))
    if scale == "ue8m0":   # TileKernels packs UE8M0 only in its column-major TMA layout
        kwargs.update(use_packed_ue8m0=True, use_tma_aligned_col_major_sf=True)
    return lambda x: tk.quant.per_token_cast(x, params["fmt"], group, **kwargs)


def tk_topk_gate(params, dims):
    tk = _tile_kernels()
    return lambda scores: tk.moe.topk_gate(scores, params["k"])


ADAPTERS = {
    "tilekernels": {
        "per_token_cast": tk_per_token_cast,
        "topk_gate": tk_topk_gate,
    },
}
