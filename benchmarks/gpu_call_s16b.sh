#!/usr/bin/env bash
# The sixteenth session's second GPU call, on the host's CPU cores only: the CPU fuzz campaign (issue 26,
# 2,000 examples per op, seed of the summary) resumed with 14 workers, mhc_pre_norm_fn_backward run again
# with its drawn magnitudes bounded (values: max_abs); the summary is rewritten into $OUT after every op.
set -o pipefail
. .gpu/env.sh
export TILELANG_PRINT_ON_COMPILATION=0 TKGEN_QUIET=1
nproc; lscpu | grep "Model name"
python3 - <<'PY'
import json, os
d = json.load(open("docs/measurements/2026-12-07-cpu-fuzz-2000/campaign.json"))
d["ops"].pop("mhc_pre_norm_fn_backward", None)        # rerun with the bound
json.dump(d, open(os.path.join(os.environ["OUT"], "campaign.json"), "w"), indent=1)
PY
timeout ${CAMPAIGN_LIMIT:-540} python3 -m tkgen fuzz --all --examples 2000 --summary $OUT/campaign.json --resume \
  --jobs ${JOBS:-14} 2>&1 | tail -40
