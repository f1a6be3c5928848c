#!/usr/bin/env bash
# The seventeenth session's campaign call, on the GPU host's CPU cores only: the CPU fuzz campaign of issue 26
# (2,000 examples per op, the summary's seed) resumed from docs/measurements/2026-12-07-cpu-fuzz-2000 with 15
# workers; the summary is rewritten into $OUT after every op, so a call cut off by its limit keeps what ran.
# SUMMARY=<file> resumes from another summary (the one an earlier call brought back).
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nproc; lscpu | grep "Model name"
cp ${SUMMARY:-docs/measurements/2026-12-07-cpu-fuzz-2000/campaign.json} $OUT/campaign.json
timeout ${CAMPAIGN_LIMIT:-540} python3 -m tkgen fuzz --all --examples 2000 --summary $OUT/campaign.json --resume \
  --jobs ${JOBS:-15} 2>&1 | tail -40
python3 -c "import json; d = json.load(open('$OUT/campaign.json')); print(len(d['ops']), 'ops,', d['examples'], 'examples')"
