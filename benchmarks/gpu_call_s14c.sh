#!/usr/bin/env bash
# The fourteenth session's third GPU call: bulk_copies on per_channel_cast of an FP8 input (issue 29's slowest
# op, 5.73x TileKernels on an H100), then the gates' options against tile_kernels 2.1.0's bits.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
echo "== bulk_copies: per_channel_cast_from_fp8"
TKGEN_BULK_CASES="per_channel_cast_from_fp8:deepseek-v3 hidden" TKGEN_BULK_COPIES="8,8:cp_async" \
  timeout ${COPIES_LIMIT:-200} python3 benchmarks/bulk_copies_gpu.py 2>&1 | grep -v coalesced_width \
  | tee $OUT/bulk_copies_fp8.log | tail -14
echo "== the gates' options against tile_kernels 2.1.0"
timeout ${GATE_LIMIT:-110} python3 benchmarks/gate_options_bits.py 2>&1 | grep -v coalesced_width \
  | tee $OUT/gate_options.md | tail -30
