"""The schedule: rewrites of a naive kernel module for one target, and the pipeline that runs them.

`pipeline` resolves an op's schedule (spec, arch block, tuned table) and applies the rewrites in order;
each other module is one rewrite: `stream` (a streamed axis), `gemm` (matmul tiles), `fold_sources`
(small state read from shared copies), `persistent` (a grid of resident blocks), `padding_rows`.
"""
