"""The IRs between a spec and its printed kernels: `prim` (typed primitive expressions: reads, constants,
operations), `kernel` (statements, buffers, kernels and modules: what a variant runs) and `signature`
(each tensor's resolved element type, container, packing, layout and shapes)."""
