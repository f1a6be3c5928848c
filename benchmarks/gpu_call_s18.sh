#!/usr/bin/env bash
# The eighteenth session's GPU call (issue 29): the ops still slower than TileKernels 2.1.0 timed side by side
# (bench phase: built in worker processes, then timed in one process, graph and eager), then Nsight Compute's
# counters of tkgen's and TileKernels' kernels for the slowest ones (benchmarks/ncu_profile.py), one process
# per (op, implementation), until NCU_LIMIT seconds have passed.
# Prepared in session 18 (2026-12-08) and not yet run: that session had 185 s of device time left, too little
# to start a machine.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
BENCH=${BENCH_OPS:-moe_topk_gate_backward,engram_gate_bwd,engram_gate_fwd,rmsnorm_backward,apply_rotary,rmsnorm_forward_and_per_token_cast,per_channel_cast,per_channel_cast_from_fp8}
if [ -n "$BENCH" ]; then
  TKGEN_GPU_OPS=$BENCH TKGEN_GPU_PHASES=bench TKGEN_GPU_AGAINST=tilekernels TKGEN_GPU_TMP=/tmp/s18-bench \
    timeout ${BENCH_LIMIT:-330} python3 benchmarks/gpu_session.py 2>&1 | grep -v coalesced_width > $OUT/bench.log
  grep "µs" $OUT/bench.log | cut -c1-200 | tail -30
fi
PROF=${PROF_OPS:-moe_topk_gate_backward,engram_gate_bwd,engram_gate_fwd,rmsnorm_backward}
start=$SECONDS
for op in ${PROF//,/ }; do
  for impl in tkgen tilekernels; do
    (( SECONDS - start > ${NCU_LIMIT:-200} )) && break 2
    PROF_OP=$op PROF_IMPL=$impl timeout 90 $NCU --profile-from-start off --clock-control none \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats --csv \
      python3 benchmarks/ncu_profile.py > $OUT/ncu_${op}_${impl}.csv 2> $OUT/ncu_${op}_${impl}.err
    echo "ncu $op $impl: rc $? ($((SECONDS - start)) s), $(wc -l < $OUT/ncu_${op}_${impl}.csv) lines"
  done
done
