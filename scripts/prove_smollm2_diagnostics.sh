#!/usr/bin/env bash
# Every diagnostic of docs/diagnostics.md and docs/layerwise.md answered on the real SmolLM2 family, with the commands
# a user types, at the reduced settings of docs/real-family.md (what ran on a loaded 2-core CPU).
#
#   scripts/prove_smollm2_diagnostics.sh [--out DIR] [--limit N] [--pairs-limit N] [--only STEP[,STEP]]
#
# 1. norm imbalance and task-vector geometry          (analyze norms / geometry)
# 2. the 28 mergeability metrics; every pair merged with zhou2026_ta and scored; the predictor fitted
# 3. TAS against accuracy: tune --check on a TA and a TIES grid
# 4. the fresh-head probe on the base and three experts, against the joint reference smollm2:joint
# 5. RegMean and Chain of Merges of the whole pool (9 experts) with true, generated and shared data, each scored
#
# Steps 1-4 leave units out (--exclude units), as when their numbers in docs/real-family.md were measured: its
# embeddings were resized for added tokens, which those commands refused then and read on the base's tokens now.
# Step 5 takes all 9 experts: its 'true' merges are those of `python sample_and_merge.py --base smollm2`.
# generalist (published without data) is left out of the mergeability metrics and their pairs run: the gradient
# metrics need labelled items. Wall times are printed per step. --only runs the named steps (norms, geometry,
# mergeability, pairs, predictor, tune, probe, layerwise). Every step resumes: a rerun reuses the merges, scores and
# caches already on disk.
set -euo pipefail

OUT=runs/smollm2-diagnostics
LIMIT=50          # items per task of the suite for the RegMean / CoM scores (the suite's default)
PAIRS_LIMIT=10    # items per task for the pairs run and the TAS check (reduced: 2 shared cores)
ONLY=all
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2;;
    --limit) LIMIT=$2; shift 2;;
    --pairs-limit) PAIRS_LIMIT=$2; shift 2;;
    --only) ONLY=$2; shift 2;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; echo "options: --out DIR (default $OUT), --limit N ($LIMIT), --pairs-limit N ($PAIRS_LIMIT), --only STEPS"; exit 0;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2;;
  esac
done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT/pools"
wanted() { [ "$ONLY" = all ] || [[ ",$ONLY," == *",${1%%-*},"* ]]; }
step() {
  local name=$1; shift; local s
  wanted "$name" || return 0
  s=$(date +%s); echo "== $name: $*"; "$@"; echo "== $name: $(( $(date +%s) - s )) s"
}

# 1. norm imbalance and geometry
step norms wildmerge analyze norms --pool smollm2 --exclude units --out "$OUT/norms"
step geometry wildmerge analyze geometry --pool smollm2 --exclude units --out "$OUT/geometry"

# 2. mergeability: metrics of the 7 experts with data, and all their 21 pairs merged with one method and scored
step mergeability wildmerge analyze mergeability --pool smollm2 --exclude units --exclude generalist --out "$OUT/mm"
step pairs wildmerge sample --pool smollm2 --exclude units,generalist --sizes 2 --k 21 --no-full \
  --methods zhou2026_ta --limit "$PAIRS_LIMIT" --keep-models none --out "$OUT/pairs"
step predictor wildmerge analyze predictor --run "$OUT/pairs" --metrics "$OUT/mm" --target relative \
  --out "$OUT/pairs/mergeability"

# 3. TAS against accuracy: 4 TA and 4 TIES points, 3 of each checked by lm-eval
cat > "$OUT/tas_grid.yml" <<'EOF'
ta_lambda: {method: ta, grid: {lambda: [0.25, 0.5, 0.75, 1.0]}}
ties_grid: {method: ties, grid: {density: [0.2, 0.5], lambda: [0.5, 1.0]}}
EOF
step tune wildmerge tune --pool smollm2 --exclude units --grid "$OUT/tas_grid.yml" --samples 16 --threads 1 \
  --check 3 --suite smollm2 --limit "$PAIRS_LIMIT" --out "$OUT/tune"

# 4. the fresh-head probe (builds the probe splits and the joint reference once); the LoRA experts sentiment and
#    topic are folded into --base first
step probe wildmerge analyze probe --model smollm2:base --model smollm2:sentiment --model smollm2:topic \
  --model smollm2:lexicon --base smollm2:base --suite smollm2_probe --reference smollm2:joint --threads 1 \
  --out "$OUT/probe"

# 5. RegMean and CoM of the 9 experts with true / generated / shared data, scored on the suite
wanted layerwise && python - "$OUT/pools" <<'EOF'
import sys, yaml
from pathlib import Path
from wildmerge.hub import resolve_path
from wildmerge.paths import recipes_dir
out = Path(sys.argv[1])
src = yaml.safe_load((recipes_dir() / "pools" / "smollm2.yml").read_text())
experts = src["experts"]
# generated: 64 texts per expert of 16 new tokens (the default 64 tokens took ~8 min per expert here)
# shared: 64 texts taken round robin from every expert's own text, given to every expert
texts = [Path(resolve_path(e["data"]["text"])).read_text().splitlines() for e in experts if "data" in e]
(out / "shared.jsonl").write_text("\n".join(texts[i % len(texts)][i // len(texts)] for i in range(64)) + "\n")
for name, default, own in (("generated", {"generate": {"max_new_tokens": 16}}, None), ("shared", None, "shared.jsonl")):
    pool = {"name": f"smollm2_{name}", "base": src["base"], **({"data": default} if default else {}),
            "experts": [{**{k: v for k, v in e.items() if k != "data"}, **({"data": own} if own else {})}
                        for e in experts]}
    (out / f"smollm2_{name}.yml").write_text(yaml.safe_dump(pool, sort_keys=False))
EOF
for v in true generated shared; do
  if [ $v = true ]; then pool=(--pool smollm2); else pool=(--pool "$OUT/pools/smollm2_$v.yml"); fi
  step "layerwise-$v" wildmerge sample "${pool[@]}" --methods com,regmean --sizes 1 --no-evaluate --out "$OUT/layerwise-$v"
  for m in com regmean; do
    step "layerwise-eval-$m-$v" wildmerge eval --model "$OUT/layerwise-$v/models/${m}__n09_full" --suite smollm2 \
      --limit "$LIMIT" --out "$OUT/eval-$m-$v"
  done
done
