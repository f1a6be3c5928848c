#!/usr/bin/env bash
# The tenth session's GPU call: get_fused_mapping at 4001 x 8 and at 4.2M pairs (checked equal to the
# plain mapping, then timed eager and under CUDA graphs); the drawn cases of the ops whose kernels changed;
# SwiGLU backward's gate-factor rounding read off TileKernels 2.1.0's bits; that op and the new mapping
# level timed against TileKernels; the 2.1.0 mHC entry points' bits and times where the script exists.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0
S=benchmarks/gpu_session.py
CHANGED=${CHANGED:-swiglu_backward_and_per_token_cast,mapping_group_offsets,mapping_chunk_offsets}
echo "== routing (mapping 4001x8 and 4.2M pairs, rope)"
timeout 200 python3 benchmarks/bench_routing.py --device cuda --out $OUT 2>&1 | tee $OUT/routing.md | tail -20
echo "== swiglu backward: 2.1.0's gate-factor rounding"
timeout 120 python3 benchmarks/swiglu_backward_v2_bits.py 2>&1 | tee $OUT/swiglu_v2_bits.md | tail -12
echo "== drawn cases of $CHANGED"
TKGEN_GPU_OPS=$CHANGED TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=10 timeout 240 python3 $S 2>&1 | tee -a $OUT/session.log | grep "props\|precompiled"
echo "== bench of swiglu_backward_and_per_token_cast against TileKernels"
TKGEN_GPU_OPS=swiglu_backward_and_per_token_cast TKGEN_GPU_PHASES=bench TKGEN_GPU_AGAINST=tilekernels \
  timeout 150 python3 $S 2>&1 | tee -a $OUT/session.log | grep -v "^  warm" | tail -15
if [ -f benchmarks/compat_mhc_bits.py ]; then
  echo "== 2.1.0 mHC entry points"
  timeout 150 python3 benchmarks/compat_mhc_bits.py --device cuda 2>&1 | tee $OUT/mhc_bits.md | tail -30
fi
