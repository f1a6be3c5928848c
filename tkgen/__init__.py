"""tkgen: declarative kernel specs for LLM operators, generated into TileLang kernels for every
architecture profile, PyTorch references, torch.library ops and Hypothesis strategies.

Pipeline (one module per stage): loader (YAML + JSON Schema) -> model (typed, names resolved) ->
stages (the stage library: compute blocks as Programs) -> lower_kernel / lower_reference (per arch
profile) -> generate (Jinja2 emitters). Run time: tkgen.ops, tkgen.runtime.
"""
__version__ = "0.1.0"
