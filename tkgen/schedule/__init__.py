"""The schedule: passes that rewrite a naive kernel module for one target, and the pipelines that run them.

`passes` is the registry (each rewrite a named pass with typed parameters) and the default pipeline of each
backend; `pipeline` resolves an op's schedule (spec, arch block, tuned table) and runs the profile's
pipeline (`apply`). Each other module holds one family of passes: `tiles`, `guards`, `stores`,
`fold_sources`, `stream`, `gemm`, `persistent`, `padding_rows`, `loops`, `tile_bytes`.
"""
