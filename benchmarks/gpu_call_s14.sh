#!/usr/bin/env bash
# The fourteenth session's GPU call: the drawn cases of every op on CUDA (moe_capacity_mask's capacity now a
# kernel argument), the routing composites with the capacity dispatch against plain PyTorch, and the new pass
# bulk_copies (off, TileLang's choice, cp.async, TMA) on rmsnorm_backward and per_channel_cast beside
# TileKernels 2.1.0. Each part has its own time limit, so that one part running long leaves the others theirs.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== drawn cases of every op on CUDA, ${EXAMPLES:-4} each"
TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=${EXAMPLES:-4} timeout ${LIMIT:-230} python3 benchmarks/gpu_session.py 2>&1 \
  | tee $OUT/session.log | grep "props\|precompiled\|phase\|FAIL\|Error" | tail -40
echo "== routing composites (bench_routing.py)"
timeout ${ROUTING_LIMIT:-110} python3 benchmarks/bench_routing.py --device cuda --out $OUT 2>&1 | tee $OUT/routing.md | tail -20
echo "== bulk_copies on and off"
timeout ${COPIES_LIMIT:-220} python3 benchmarks/bulk_copies_gpu.py 2>&1 | tee $OUT/bulk_copies.log | tail -30
ls $OUT
