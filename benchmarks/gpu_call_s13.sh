#!/usr/bin/env bash
# The thirteenth session's GPU call: moe_capacity_mask (a prefix along the rows in two launches) against a
# plain-PyTorch capacity dispatch with the mapping and RoPE rows of bench_routing.py; the drawn cases of
# every op on CUDA; the gates' options against tile_kernels 2.1.0's bits.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
echo "== routing composites (bench_routing.py)"
timeout ${ROUTING_LIMIT:-170} python3 benchmarks/bench_routing.py --device cuda --out $OUT 2>&1 | tee $OUT/routing.md | tail -20
echo "== drawn cases of every op on CUDA, ${EXAMPLES:-4} each"
TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=${EXAMPLES:-4} timeout ${LIMIT:-280} python3 benchmarks/gpu_session.py 2>&1 \
  | tee $OUT/session.log | grep "props\|precompiled\|phase"
echo "== the gates' options against tile_kernels 2.1.0"
timeout ${GATE_LIMIT:-110} python3 benchmarks/gate_options_bits.py 2>&1 | tee $OUT/gate_options.md | tail -40
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
