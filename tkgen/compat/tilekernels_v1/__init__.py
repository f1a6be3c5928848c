"""TileKernels' first release's public API (`tile_kernels`) on tkgen's kernels: `import
tkgen.compat.tilekernels_v1 as tile_kernels`. Same modules (quant, moe, transpose, engram, mhc,
modeling), names, argument order, defaults, return values and in-place behaviour; what tkgen has not
built raises NotImplementedError naming it (see tkgen/compat/__init__.py)."""
import sys

from .._missing import module
from ...nn import engram as _engram
from . import engram, mhc_modeling, mhc_ops, moe, quant, transpose

RELEASE = "1.0"

mhc = module(__name__ + ".mhc", RELEASE, [], doc="TileKernels 1.0's `mhc`: an empty package; its kernels are "
                                                 "reached through modeling.mhc.ops.")
modeling = module(__name__ + ".modeling", RELEASE, [])
modeling.engram = module(__name__ + ".modeling.engram", RELEASE, [],
                         doc="TileKernels 1.0's `modeling.engram`: the gate composite on tkgen's kernels.")
modeling.engram.engram_gate, modeling.engram.EngramGateFn = _engram.engram_gate, _engram.EngramGateFn
modeling.engram.__all__ = ["engram_gate", "EngramGateFn"]
modeling.mhc = mhc_modeling
modeling.mhc.ops = mhc_ops
for _m in (mhc, modeling, modeling.engram):
    sys.modules[_m.__name__] = _m
sys.modules[__name__ + ".modeling.mhc"] = mhc_modeling      # real modules, importable by TileKernels' paths
sys.modules[__name__ + ".modeling.mhc.ops"] = mhc_ops

__all__ = ["engram", "mhc", "modeling", "moe", "quant", "transpose"]
