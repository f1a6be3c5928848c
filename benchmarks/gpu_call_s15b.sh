#!/usr/bin/env bash
# The fifteenth session's second GPU call: the one drawn case of the first call that failed
# (mhc_pre_norm_fn_backward's fn_grad, before its operands were rounded to TF32 in the spec) replayed, then 50
# cases of each op changed since that call, then the CPU fuzz campaign (issue 26) resumed on this host's
# cores, its summary written into $OUT after every op.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== the failed case replayed"
python3 -m tkgen fuzz mhc_pre_norm_fn_backward --device cuda \
  --replay "$(cat docs/measurements/2026-12-07-h100-s15/mhc_pre_norm_fn_backward_case.json)" 2>&1 | tail -3
echo "== 50 cases of each op changed"
TKGEN_GPU_OPS=$CHANGED TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=50 TKGEN_GPU_DRAWS=12 TKGEN_GPU_SPECS=4 \
  TKGEN_GPU_PROCS=4 timeout ${LIMIT:-150} python3 benchmarks/gpu_session.py 2>&1 | grep -v "coalesced_width" \
  | tee $OUT/session.log | grep "props\|precompiled\|phase\|FAIL\|Error\|drawn" | tail -20
echo "== the CPU fuzz campaign, resumed, ${JOBS:-14} workers"
cp docs/measurements/2026-12-07-cpu-fuzz-2000/campaign.json $OUT/campaign.json
timeout ${CAMPAIGN_LIMIT:-200} python3 -m tkgen fuzz --all --examples 2000 --summary $OUT/campaign.json --resume \
  --jobs ${JOBS:-14} 2>&1 | tail -30
nproc; lscpu | grep "Model name"
