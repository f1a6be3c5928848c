"""The IRs between a spec and its printed kernels: `prim` (typed primitive expressions: reads, constants,
operations) and `kernel` (statements, buffers, kernels and modules: what a variant runs). They import
nothing else of tkgen: every other package builds on them."""
