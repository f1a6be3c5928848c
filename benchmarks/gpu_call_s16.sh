#!/usr/bin/env bash
# The sixteenth session's GPU call: every op with a TileKernels 2.1.0 adapter timed side by side with it in
# one process (issue 29's ten slowest first; graph and eager; copy bandwidth measured in the same run), then
# the pass pipeline_copies on rmsnorm_backward (issue 29), off against cp.async copies, 1 and 2 stages.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
SLOW=per_channel_cast_from_fp8,engram_gate_bwd,moe_topk_gate_backward,per_token_cast_and_cast_back,per_channel_cast
SLOW=$SLOW,normalize_weight,rmsnorm_backward,engram_gate_fwd,rmsnorm_forward_and_per_token_cast,apply_rotary
REST=per_token_cast,swiglu_forward,swiglu_forward_and_per_token_cast,swiglu_backward,rmsnorm_forward
REST=$REST,swiglu_backward_and_per_token_cast,moe_topk_gate_forward,topk_gate,cast_back,per_block_cast_lossless
REST=$REST,transpose,engram_hash,engram_sinkhorn_step,mhc_post
echo "== bench against tile_kernels 2.1.0"
TKGEN_GPU_OPS=${OPS:-$SLOW,$REST} TKGEN_GPU_PHASES=bench TKGEN_GPU_AGAINST=tilekernels \
  timeout ${BENCH_LIMIT:-390} python3 benchmarks/gpu_session.py 2>&1 | grep -v coalesced_width \
  | tee $OUT/session.log | grep "built\|phase\|Error\|died" | tail -20
for d in /tmp/tkgen-gpu-session/bench*; do [ -f $d/bench.json ] && cp $d/bench.json $OUT/$(basename $d).json \
  && cp $d/bench.md $OUT/$(basename $d).md; done
cat $OUT/bench*.md 2>/dev/null | head -80
echo "== pipeline_copies on rmsnorm_backward"
TKGEN_BULK_OPS=rmsnorm_backward TKGEN_BULK_COPIES="8,8:cp_async,8@2,8:cp_async@2" \
  timeout ${COPIES_LIMIT:-150} python3 benchmarks/bulk_copies_gpu.py 2>&1 | grep -v coalesced_width \
  | tee $OUT/pipeline_copies.log | tail -14
ls $OUT
