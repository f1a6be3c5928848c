#!/usr/bin/env bash
# The twelfth session's GPU call: the drawn cases of every op on CUDA (the kernels now print the tile
# indices the IR writes out, variants that differ in whole statements share one function, the gates'
# options and transpose_weight_sf are new); then the gates' options against tile_kernels 2.1.0's bits.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0
S=benchmarks/gpu_session.py
echo "== drawn cases of every op on CUDA, ${EXAMPLES:-4} each"
TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=${EXAMPLES:-4} timeout ${LIMIT:-380} python3 $S 2>&1 | tee $OUT/session.log \
  | grep "props\|precompiled\|phase"
echo "== the gates' options against tile_kernels 2.1.0"
timeout ${GATE_LIMIT:-150} python3 benchmarks/gate_options_bits.py 2>&1 | tee $OUT/gate_options.md | tail -40
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
