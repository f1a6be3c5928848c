#!/usr/bin/env bash
# The seventeenth session's first GPU call: (1) 50 cases on CUDA of every op whose CUDA kernel the let-bound
# shared values changed (tkgen/ir/sharing.py), 4 specializations each, in 4 processes sharing the GPU;
# (2) those ops and issue 29's (stale adapters fixed) timed side by side with TileKernels 2.1.0, once with the
# generated code before the change (.gpu/old_generated.tar.gz, TKGEN_GENERATED) and once after, on this
# machine, one after the other. Each bench run measures the copy bandwidth itself.
# PARTS (default "props old new compare"): which steps this call runs (a call has 10 minutes: props and old
# in one call, new and compare in the next, on the same warm machine).
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
CHANGED=cast_back,engram_gate_bwd,engram_hash,mapping_chunk_counts,mapping_chunk_offsets,mapping_segments
CHANGED=$CHANGED,mask_indices_by_tp,mhc_post,mhc_post_backward,mhc_pre_apply_mix
CHANGED=$CHANGED,mhc_reduce_partials_and_rmsnorm_backward,moe_capacity_mask,moe_topk_gate_backward,moe_topk_gate_forward
CHANGED=$CHANGED,per_block_cast,per_block_cast_lossless,per_block_cast_with_sf_only,per_channel_cast
CHANGED=$CHANGED,per_channel_cast_from_fp8,per_token_cast,per_token_cast_and_cast_back,per_token_cast_requant
CHANGED=$CHANGED,per_token_cast_requant_stochastic,per_token_cast_stochastic,per_token_cast_with_precomputed_sf
CHANGED=$CHANGED,per_token_cast_with_sf_only,reduce_fused,stochastic_cast,swiglu_forward_and_per_channel_cast_and_transpose
CHANGED=$CHANGED,swiglu_forward_and_per_token_cast,top2_sum_gate,transpose_weight_sf
PARTS=${PARTS:-props old new compare}
if [[ " $PARTS " == *" props "* ]]; then
echo "== 50 cases of the changed ops on CUDA"
TKGEN_GPU_OPS=${PROPS_OPS:-$CHANGED} TKGEN_GPU_PHASES=props TKGEN_GPU_EXAMPLES=50 TKGEN_GPU_DRAWS=8 TKGEN_GPU_SPECS=4 \
  TKGEN_GPU_PROCS=4 TKGEN_GPU_PRECOMPILE_WITHIN=150 TKGEN_GPU_TMP=/tmp/s17-props \
  timeout ${PROPS_LIMIT:-280} python3 benchmarks/gpu_session.py 2>&1 | grep -v "coalesced_width" \
  | tee $OUT/props.log | grep "props\|precompiled\|phase\|FAIL\|Error\|drawn" | cut -c1-300 | tail -45
cp /tmp/s17-props/props_results.jsonl $OUT/ 2>/dev/null
fi
BENCH=${BENCH_OPS:-per_token_cast,cast_back,per_token_cast_and_cast_back,per_block_cast_lossless,per_channel_cast,swiglu_forward_and_per_token_cast,moe_topk_gate_forward,moe_topk_gate_backward,engram_gate_bwd,mhc_post,per_channel_cast_from_fp8,swiglu_backward_and_per_token_cast}
mkdir -p /tmp/old && tar -xzf .gpu/old_generated.tar.gz -C /tmp/old
for which in old new; do
  [[ " $PARTS " == *" $which "* ]] || continue
  echo "== bench ($which generated code) against tile_kernels 2.1.0"
  gen=$([ $which = old ] && echo /tmp/old/generated || echo "$PWD/generated")
  mkdir -p $OUT/$which /tmp/s17-bench
  OUT=$OUT/$which TKGEN_GENERATED=$gen TKGEN_GPU_OPS=$BENCH TKGEN_GPU_PHASES=bench TKGEN_GPU_AGAINST=tilekernels \
    TKGEN_GPU_TMP=/tmp/s17-$which timeout ${BENCH_LIMIT:-230} python3 benchmarks/gpu_session.py 2>&1 \
    | grep -v coalesced_width > $OUT/$which/bench.log
  tail -3 $OUT/$which/bench.log
  cp $OUT/$which/bench.json /tmp/s17-bench/$which.json 2>/dev/null    # kept on the machine for the next call
done
[[ " $PARTS " == *" compare "* ]] || exit 0
python3 - <<'PY'
import json, os
rows = {}
for which in ("old", "new"):
    try:
        d = json.load(open(f"/tmp/s17-bench/{which}.json"))
    except OSError:
        continue
    print(which, "copy GB/s", round(d["meta"].get("copy_gbps", 0)))
    for r in d["results"]:
        rows.setdefault((r["op"], r["workload"], r["impl"]), {})[which] = (r["time_us"], r["eager_us"])
print("op | workload | impl | graph old/new µs | eager old/new µs")
for (op, wl, impl), v in rows.items():
    o, n = v.get("old", (None, None)), v.get("new", (None, None))
    print(op, "|", wl, "|", impl, "|", o[0], n[0], "|", o[1], n[1])
PY
ls -R $OUT
