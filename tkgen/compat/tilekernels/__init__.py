"""TileKernels 2.1.0's public API (`tile_kernels`) on tkgen's kernels: `import tkgen.compat.tilekernels as
tile_kernels`. Same modules (quant, moe, engram, mhc, modeling, rand, transform), names, argument order,
defaults, return values and in-place behaviour; what tkgen has not built raises NotImplementedError naming
it (see tkgen/compat/__init__.py)."""
import sys

from .._missing import module
from . import config, engram, modeling_engram, moe, quant, rand, transform
from .config import *  # noqa: F401,F403  (TileKernels re-exports its knobs at the top)

RELEASE = "2.1.0"

mhc = module(__name__ + ".mhc", RELEASE, [
    "expand_to_mhc_bwd", "expand_to_mhc_fwd", "mhc_head_compute_mix_bwd", "mhc_head_compute_mix_fwd",
    "mhc_multilayer_recompute", "mhc_fn_normw_merge_bwd", "mhc_fn_normw_merge_fwd",
    "mhc_reduce_partials_and_rmsnorm_bwd", "mhc_reduce_partials_and_rmsnorm_fwd", "mhc_post_bwd", "mhc_post_fwd",
    "mhc_pre_apply_mix_bwd", "mhc_pre_apply_mix_fwd", "mhc_pre_big_fuse_fwd", "mhc_pre_split_mixes_bwd",
    "mhc_pre_split_mixes_fwd", "mhc_sinkhorn_bwd", "mhc_sinkhorn_fwd"],
    doc="TileKernels 2.1.0's `mhc`: destination-passing kernel entry points whose signatures tkgen does not "
        "reproduce yet (every function raises NotImplementedError). The computations are tkgen ops: "
        "expand_to_mhc, mhc_pre_apply_mix, mhc_post, mhc_pre_split_mixes, sinkhorn_normalize, "
        "mhc_head_compute_mix and their _backward ops; the first release's signatures are in "
        "tkgen.compat.tilekernels_v1.modeling.mhc.ops.")
modeling = module(__name__ + ".modeling", RELEASE, [])
modeling.engram = modeling_engram
for _m in (mhc, modeling):
    sys.modules[_m.__name__] = _m          # `from tkgen.compat.tilekernels.mhc import ...` works too
sys.modules[__name__ + ".modeling.engram"] = modeling_engram     # a real module, importable by TileKernels' path

__all__ = ["config", "engram", "mhc", "modeling", "moe", "quant", "rand", "transform", *config.__all__]
