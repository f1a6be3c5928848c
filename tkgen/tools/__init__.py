"""The tools around the generator: the `tkgen` command line (`cli`), and benchmarking and tuning on a
device (`bench`, `bench_cli`)."""
