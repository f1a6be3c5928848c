"""TileKernels' first release's public API (`tile_kernels`) on tkgen's kernels: `import
tkgen.compat.tilekernels_v1 as tile_kernels`. Same modules (quant, moe, transpose, engram, mhc,
modeling), names, argument order, defaults, return values and in-place behaviour; what tkgen has not
built raises NotImplementedError naming it (see tkgen/compat/__init__.py)."""
import sys

from .._missing import module
from .. import _engram
from . import engram, moe, quant, transpose

RELEASE = "1.0"

mhc = module(__name__ + ".mhc", RELEASE, [], doc="TileKernels 1.0's `mhc`: its kernels are reached through "
                                                 "modeling.mhc.ops, none built in tkgen yet.")
modeling = module(__name__ + ".modeling", RELEASE, [])
modeling.engram = module(__name__ + ".modeling.engram", RELEASE, [],
                         doc="TileKernels 1.0's `modeling.engram`: the gate composite on tkgen's kernels.")
modeling.engram.engram_gate, modeling.engram.EngramGateFn = _engram.engram_gate, _engram.EngramGateFn
modeling.engram.__all__ = ["engram_gate", "EngramGateFn"]
modeling.mhc = module(__name__ + ".modeling.mhc", RELEASE, ["expand_from_embedding", "mhc_head", "mhc_pre"])
modeling.mhc.ops = module(__name__ + ".modeling.mhc.ops", RELEASE, [
    "expand_to_mhc", "mhc_head_compute_mix", "mhc_multilayer_recompute", "mhc_pre_norm_fn", "mhc_post",
    "mhc_post_bwd", "mhc_post_fwd", "mhc_pre_apply_mix", "mhc_pre_big_fuse", "mhc_pre_split_mixes",
    "sinkhorn_normalize"])
for _m in (mhc, modeling, modeling.engram, modeling.mhc, modeling.mhc.ops):
    sys.modules[_m.__name__] = _m

__all__ = ["engram", "mhc", "modeling", "moe", "quant", "transpose"]
