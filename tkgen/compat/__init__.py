"""TileKernels-compatible APIs running tkgen's kernels: switch by changing one import.

    import tkgen.compat.tilekernels as tile_kernels        # TileKernels 2.1.0
    import tkgen.compat.tilekernels_v1 as tile_kernels     # TileKernels' first release

Each mirrors its release's module layout, function names, argument order, defaults, return values and
in-place behaviour. A function or an option that tkgen has not built raises NotImplementedError naming
it; nothing falls back silently. Calls go through `tkgen.ops` (checked, on CPU or CUDA tensors).
"""
