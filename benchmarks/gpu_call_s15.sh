#!/usr/bin/env bash
# The fifteenth session's first GPU call: 50 cases of every op on CUDA (issue 26), each op's first 2
# specializations among 8 drawn cases, the rest of the 50 those cases with fresh values and more rows, checked
# in 4 processes sharing the GPU; the precompile starts no build after WITHIN seconds (the checks build the
# rest). RESUME=1 goes on from a call that ran out of time on the same machine.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== ${EXAMPLES:-50} cases of every op on CUDA"
TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=${EXAMPLES:-50} TKGEN_GPU_DRAWS=8 TKGEN_GPU_SPECS=${SPECS:-2} TKGEN_GPU_PROCS=4 \
  TKGEN_GPU_PRECOMPILE_WITHIN=${WITHIN:-300} TKGEN_GPU_RESUME=${RESUME:-0} \
  timeout ${LIMIT:-560} python3 benchmarks/gpu_session.py 2>&1 \
  | grep -v "coalesced_width" | tee $OUT/session.log | grep "props\|precompiled\|phase\|FAIL\|Error\|drawn" | tail -90
cp /tmp/tkgen-gpu-session/props_results.jsonl $OUT/ 2>/dev/null
ls $OUT
