#!/usr/bin/env bash
# The third GPU call of the sixth session: every op's drawn cases on CUDA after the merges, the persistent
# op's run-to-run bits, then the ops changed since the second call benched (eager and CUDA graph) against
# TileKernels, and the new ops' host cost.
set -o pipefail
. .gpu/env.sh
S=benchmarks/gpu_session.py
CHANGED=${CHANGED:-cast_back,per_block_cast_lossless,swiglu_backward_and_per_token_cast,per_token_cast_and_cast_back}
NEW=${NEW:-}
# the small specs of the stage additions (tests/stage_specs), generated apart and fuzzed on CUDA in parallel
D=/tmp/stage_tree; rm -rf $D; mkdir -p $D/specs/demo; cp -r specs/formats specs/archs $D/specs/; cp tests/stage_specs/*.yaml $D/specs/demo/
python3 -m tkgen --specs $D/specs generate --out $D/generated > $D/generate.log 2>&1 || tail -5 $D/generate.log
for op in folds gathers segs int_mix float_mix; do
  timeout 200 python3 -m tkgen --specs $D/specs fuzz $op --device cuda --examples 6 --seed 3 --generated $D/generated > $D/$op.log 2>&1 &
done
TKGEN_GPU_PHASES=props,determinism TKGEN_GPU_EXAMPLES=10 timeout 260 python3 $S 2>&1 | tee -a $OUT/session.log | grep -v "^  warm"
wait
for op in folds gathers segs int_mix float_mix; do echo "== stage spec $op (CUDA)"; tail -4 $D/$op.log; done 2>&1 | tee -a $OUT/session.log
TKGEN_GPU_OPS=$CHANGED${NEW:+,$NEW} TKGEN_GPU_PHASES=bench,eager TKGEN_GPU_AGAINST=tilekernels \
  timeout 270 python3 $S 2>&1 | tee -a $OUT/session.log | grep -v "^  warm"
cd $OUT && tar czf extra.tgz $(ls | grep -v -E '^(session.log|eager.md|bench.md|bench.json)$') 2>/dev/null
ls $OUT | grep -v -E '^(session.log|eager.md|bench.md|bench.json|extra.tgz)$' | xargs -r rm -f
