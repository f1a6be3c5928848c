#!/usr/bin/env bash
# The eleventh session's GPU call: the drawn cases of every op on CUDA after the kernels moved into one
# kernel_cuda module per op with a knob table per profile (the sm90 table on an H100 or H200).
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0
S=benchmarks/gpu_session.py
echo "== drawn cases of every op on CUDA, ${EXAMPLES:-4} each"
TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=${EXAMPLES:-4} timeout ${LIMIT:-540} python3 $S 2>&1 | tee $OUT/session.log \
  | grep "props\|precompiled\|phase"
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
