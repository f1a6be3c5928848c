#!/usr/bin/env bash
# The fourteenth session's second GPU call: the drawn cases of every op on CUDA (the first call's 230 s ran out
# while the workers compiled), then the capacity dispatch against plain PyTorch.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== routing: the capacity dispatch"
timeout ${ROUTING_LIMIT:-60} python3 benchmarks/bench_routing.py --device cuda --only capacity --out $OUT 2>&1 \
  | tee $OUT/routing.md | tail -8
echo "== drawn cases of every op on CUDA, ${EXAMPLES:-4} each"
TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=${EXAMPLES:-4} timeout ${LIMIT:-420} python3 benchmarks/gpu_session.py 2>&1 \
  | grep -v "coalesced_width" | tee $OUT/session.log | grep "props\|precompiled\|phase\|FAIL\|Error\|passed\|failed" | tail -40
ls $OUT
