#!/usr/bin/env bash
# The demo main job on a GPU: merge with mergekit on the GPU (--merge-device cuda) and evaluate on it (the suite's
# device, auto = the GPU when there is one), then read the device of every merge (RUN/models/*/merge_info.json) and
# of every evaluation job (RUN/eval/demo/results/*.json) from the run's own records and fail if one is not cuda.
# Last, a plain `wildmerge eval RUN --suite demo` must run 0 jobs: the job ids of `sample` and `eval` agree.
#
#   benchmarks/gpu_main_job.sh [--accept-cpu] [--out RUN] [-- extra `wildmerge sample` options]
#
# --accept-cpu: the rehearsal on a machine without a GPU (merges and jobs on the CPU pass); e.g.
#   benchmarks/gpu_main_job.sh --accept-cpu --out /tmp/gpu-rehearsal -- --methods ta --sizes 2 --k 1 --no-full --limit 4
# The demo family is built on first use (about 5 minutes on a CPU; WILDMERGE_DEMO_CACHE picks its folder,
# WILDMERGE_DEMO_QUICK=1 builds the smaller quick family).
set -euo pipefail

accept="cuda"
out="runs/gpu-main-job"
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --accept-cpu) accept="cuda|cpu"; shift ;;
    --out) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "gpu_main_job.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$here/.venv/bin/python}"
[[ -x "$py" ]] || py="$(command -v python3)"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"

merge_device="cuda"
[[ "$accept" == "cuda" ]] || "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || merge_device="cpu"
if [[ "$accept" == "cuda" ]]; then
  "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || { echo "gpu_main_job.sh: no CUDA GPU visible (use --accept-cpu for the CPU rehearsal)" >&2; exit 2; }
  "$py" -c 'import torch; print("GPU:", torch.cuda.get_device_name(0))'
fi

start=$(date +%s)
"$py" -m wildmerge.cli sample --out "$out" --merge-device "$merge_device" "${extra[@]}"
echo "sample: $(( $(date +%s) - start )) s"

"$py" - "$out" "$accept" <<'EOF'
import json, re, sys
from pathlib import Path

run, accept = Path(sys.argv[1]), sys.argv[2]
rows = []
for info in sorted(run.glob("models/*/merge_info.json")):
    rows.append(("merge", info.parent.name, json.loads(info.read_text()).get("device") or "unrecorded"))
for result in sorted(run.glob("eval/demo/results/*.json")):
    record = json.loads(result.read_text())
    rows.append(("eval", record.get("job_id", result.stem), record.get("device") or f"unrecorded ({record.get('status')})"))
for kind, name, device in rows:
    print(f"{kind:5s} {name:40s} {device}")
bad = [r for r in rows if not re.match(rf"({accept})\b", r[2])]
merges, jobs = sum(r[0] == "merge" for r in rows), sum(r[0] == "eval" for r in rows)
print(f"{merges} merges, {jobs} evaluation jobs; {len(bad)} not on {accept}")
if not merges or not jobs or bad:
    sys.exit(1)
EOF

eval_args=()  # the evaluation overrides given to sample (a rehearsal's --limit) apply to the check as well
for i in "${!extra[@]}"; do
  case "${extra[$i]}" in
    --limit|--batch-size|--dtype) eval_args+=("${extra[$i]}" "${extra[$((i + 1))]}") ;;
    --eval-device) eval_args+=(--device "${extra[$((i + 1))]}") ;;
  esac
done
again="$("$py" -m wildmerge.cli eval "$out" --suite demo --no-report "${eval_args[@]}" 2>/dev/null)"
echo "$again" | grep "distinct job"
grep -q " 0 to run" <<<"$again" \
  || { echo "gpu_main_job.sh: wildmerge eval after sample ran jobs again (job ids differ)" >&2; exit 1; }
echo "gpu_main_job.sh: OK (every merge and every job on ${accept}; eval after sample ran 0 jobs)"
