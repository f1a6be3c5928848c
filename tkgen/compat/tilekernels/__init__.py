"""TileKernels 2.1.0's public API (`tile_kernels`) on tkgen's kernels: `import tkgen.compat.tilekernels as
tile_kernels`. Same modules (quant, moe, engram, mhc, modeling, rand, transform), names, argument order,
defaults, return values and in-place behaviour; what tkgen has not built raises NotImplementedError naming
it (see tkgen/compat/__init__.py)."""
import sys

from .._missing import module
from . import config, engram, mhc, modeling_engram, moe, quant, rand, transform
from .config import *  # noqa: F401,F403  (TileKernels re-exports its knobs at the top)

RELEASE = "2.1.0"

modeling = module(__name__ + ".modeling", RELEASE, [])
modeling.engram = modeling_engram
sys.modules[modeling.__name__] = modeling     # `from tkgen.compat.tilekernels.modeling import ...` works too
sys.modules[__name__ + ".modeling.engram"] = modeling_engram     # a real module, importable by TileKernels' path

__all__ = ["config", "engram", "mhc", "modeling", "moe", "quant", "rand", "transform", *config.__all__]
