#!/usr/bin/env bash
# Proof of the fresh-head probe over model seeds and class partitions (the fresh-head probe paper, Tables 2, 5-7,
# Fig. 2) on the demo family: three runs sampled with seeds 0, 1, 2 (TA and TIES of one 4-expert subset each), probed
# in one command with the Ward and two random class partitions.
# Usage: scripts/probe_seeds_proof_demo.sh [DIR]   (default runs/probe-seeds; resumable: rerun to finish)
set -euo pipefail
DIR=${1:-runs/probe-seeds}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
for s in 0 1 2; do
  wildmerge sample --seed "$s" --methods ta,ties --sizes 4 --k 1 --no-full --no-evaluate --out "$DIR/run$s"
done
wildmerge analyze probe "$DIR/run0" "$DIR/run1" "$DIR/run2" --suite demo_probe --reference demo:joint --seeds 0,1,2 \
  --models base,ta__n04_s00,ties__n04_s00 --partitions ward,random:100,random:200 --out "$DIR/seeds"
