#!/usr/bin/env bash
# The fresh-head probe over model seeds and random skill partitions (the fresh-head probe paper, Tables 5 and 6) on
# quick demo families: for each family seed (default 0 1 2) the family itself (Table 5), and for each partition
# (default random:100:3 random:200:3) its partition family (Table 6), each with its own joint reference; TA and TIES
# of all the family's experts, probed against that family's joint; then the per-seed tables with mean ± SD.
# Usage: scripts/probe_families_demo.sh [DIR] [SEEDS] [PARTITIONS]   (default runs/probe-families "0 1 2"
#   "random:100:3 random:200:3"; resumable: rerun to finish, the same numbers)
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,7p' "$0" | cut -c3-; exit 0; fi
DIR=${1:-runs/probe-families}
SEEDS=${2:-0 1 2}
PARTITIONS=${3:-random:100:3 random:200:3}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WILDMERGE_DEMO_QUICK=1

cell() {  # one family: seed $1, partition $2 ("" for the family's own experts), run folder $3
  export WILDMERGE_DEMO_SEED=$1 WILDMERGE_DEMO_PARTITION=$2
  local pool
  pool=$(python -c "from wildmerge.hub import resolve_path; print(resolve_path('demo:pool'))")
  wildmerge sample --base "$pool" --methods ta,ties --sizes 3 --k 1 --no-full --no-evaluate --out "$3"
  wildmerge analyze probe "$3" --suite demo_probe --reference demo:joint --seeds 0,1,2
}

runs=()
for s in $SEEDS; do cell "$s" "" "$DIR/seed$s"; runs+=("$DIR/seed$s"); done
wildmerge analyze probe-families "${runs[@]}" --suite demo_probe --out "$DIR/table5"
for p in $PARTITIONS; do
  runs=()
  for s in $SEEDS; do cell "$s" "$p" "$DIR/${p//:/-}/seed$s"; runs+=("$DIR/${p//:/-}/seed$s"); done
  wildmerge analyze probe-families "${runs[@]}" --suite demo_probe --out "$DIR/table6-${p//:/-}"
done
