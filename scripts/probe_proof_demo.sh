#!/usr/bin/env bash
# Proof of the fresh-head probe (the fresh-head probe paper) on the demo family: N, FH and R for TA, TIES, TSV-M and Iso-C merges of
# n = 2, 4 and all 12 experts, plus the ensemble and the centroid-routed composer of the same subsets.
# Usage: scripts/probe_proof_demo.sh [RUN_DIR]   (default runs/probe-proof; resumable: rerun to finish)
set -euo pipefail
RUN=${1:-runs/probe-proof}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
wildmerge sample --methods ta,ties,tsv_m,iso_c --sizes 2,4 --k 1 --no-evaluate --out "$RUN"
MERGES=$(python -c "import json,sys; p=json.load(open(sys.argv[1])); print(','.join(e['model_id'] for e in p['entries'] if e['kind'] in ('base','merge')))" "$RUN/plan.json")
COMPOSITIONS=$(for k in ensemble composer; do for s in n02_s00 n04_s00 n12_full; do printf '%s__%s,' $k $s; done; done)
wildmerge analyze probe "$RUN" --suite scripts/demo_probe_proof_suite.yml --reference demo:joint --seeds 0,1,2 --composition \
  --models "${MERGES},${COMPOSITIONS%,}" --join-leaderboard
python -c "import json,sys; from wildmerge.analysis.probe.probe_models import summary_markdown; print(summary_markdown(json.load(open(sys.argv[1]))['rows']))" "$RUN/probe/demo_probe_proof/probe.json"
