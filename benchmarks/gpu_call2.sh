#!/usr/bin/env bash
# The second GPU call of the sixth session: props of the ops the session changed, rmsnorm_backward tuned
# and checked for run-to-run bits, then every op benched (eager and CUDA graph) against TileKernels.
set -o pipefail
. .gpu/env.sh
S=benchmarks/gpu_session.py
TKGEN_GPU_OPS=rmsnorm_backward,swiglu_backward_and_per_token_cast,per_token_cast,rmsnorm_forward_and_per_token_cast \
  TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=20 timeout 100 python3 $S 2>&1 | tee -a $OUT/session.log | grep -v "^  warm"
TKGEN_GPU_OPS=rmsnorm_backward TKGEN_GPU_PHASES=tune,determinism \
  TKGEN_GPU_TUNE_SPACE='{"threads":[256,512,1024],"blocks":[132,264,528]}' \
  timeout 150 python3 $S 2>&1 | tee -a $OUT/session.log | grep -v "^  warm"
TKGEN_GPU_PHASES=bench,eager TKGEN_GPU_AGAINST=tilekernels timeout 310 python3 $S 2>&1 | tee -a $OUT/session.log | grep -v "^  warm"
cd $OUT && tar czf extra.tgz $(ls | grep -v -E '^(session.log|sm90.yaml|eager.md|bench.md|bench.json)$') 2>/dev/null
ls $OUT | grep -v -E '^(session.log|sm90.yaml|eager.md|bench.md|bench.json|extra.tgz)$' | xargs -r rm -f
