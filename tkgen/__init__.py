"""tkgen: declarative kernel specs for LLM operators, generated into TileLang kernels for every
architecture profile, PyTorch references, torch.library ops and Hypothesis strategies.

One package per stage of the pipeline, each importing only those before it:

    ir (the primitive expressions and the kernel IR)
    -> spec (YAML read and schema-checked, the typed model, formats, each variant's signature)
    -> lower (the stage library; a variant's stages lowered to the naive kernel IR)
    -> schedule (the rewrites of a kernel module for one target)
    -> codegen (TileLang kernels and PyTorch references printed, files written)
    -> driver (validate and generate: the one path from specs to files) -> tools (the CLI, bench, tune).

At run time, generated packages need only `tkgen.runtime` (and `tkgen.testing` for their strategies);
`tkgen.ops`, `tkgen.nn` and `tkgen.compat` are the public entry points.
"""
__version__ = "0.1.0"
