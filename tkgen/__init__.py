"""tkgen: declarative kernel specs for LLM operators, generated into TileLang kernels for every
architecture profile, PyTorch references, torch.library ops and Hypothesis strategies.

Pipeline (one module per stage): loader (YAML + JSON Schema) -> model (typed, names resolved) ->
stages (the stage library: compute blocks as Programs) -> signature (each variant's tensor types) ->
lower (the naive kernel IR, tkgen/kir.py) -> schedule (its rewrites for one arch profile) ->
print_tilelang / print_torch (kernels and references) -> generate (files). Run time: tkgen.ops,
tkgen.runtime.
"""
__version__ = "0.1.0"
