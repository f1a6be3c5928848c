#!/usr/bin/env bash
# One GPU call of a session: the drawn cases of the ops in $OPS on CUDA (and $PROPS_ALSO, only checked),
# then those ops benched (eager and CUDA graph) against $AGAINST, and their host cost. Every phase has its
# own time limit, so that one slow phase leaves the others their time.
#   OPS=expand_to_fused,reduce_fused benchmarks/gpu_call.sh      (on the GPU host, from the repository root)
set -o pipefail
. .gpu/env.sh
S=benchmarks/gpu_session.py
AGAINST=${AGAINST:-torch,compile,plain,plain_compile,tilekernels}
PROPS_TIME=${PROPS_TIME:-200}
BENCH_TIME=${BENCH_TIME:-240}
TKGEN_GPU_OPS=$OPS${PROPS_ALSO:+,$PROPS_ALSO} TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=${EXAMPLES:-10} \
  timeout $PROPS_TIME python3 $S 2>&1 | tee -a $OUT/session.log | grep -v "^  warm"
TKGEN_GPU_OPS=$OPS TKGEN_GPU_PHASES=bench,eager TKGEN_GPU_AGAINST=$AGAINST \
  timeout $BENCH_TIME python3 $S 2>&1 | tee -a $OUT/session.log | grep -v "^  warm"
cd $OUT && tar czf extra.tgz $(ls | grep -v -E '^(session.log|eager.md|bench.md|bench.json)$') 2>/dev/null
ls $OUT | grep -v -E '^(session.log|eager.md|bench.md|bench.json|extra.tgz)$' | xargs -r rm -f
