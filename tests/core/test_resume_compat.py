"""A run folder written before the refactor resumes with every merge id and job id unchanged: nothing is merged or
evaluated again, and the scores are the recorded ones (fixture: tests/fixtures/run_v1_compat/README.md)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run_v1_compat"
WRITTEN_AT = "/tmp/wmcompat"


def _relocated(dst: Path) -> Path:
    shutil.copytree(FIXTURE, dst)
    for path in dst.rglob("*"):
        sealed = path.parent.name == "results"  # checksummed result records: left as written
        if path.is_file() and not sealed and path.suffix in (".json", ".yml", ".yaml", ".csv", ".md", ".jsonl"):
            text = path.read_text()
            if WRITTEN_AT in text:
                path.write_text(text.replace(WRITTEN_AT, str(dst)))
    return dst


def test_an_old_run_resumes_with_the_same_ids(tmp_path):
    root = _relocated(tmp_path / "compat")
    run = root / "run"
    plan_before = json.loads((run / "plan.json").read_text())
    out = subprocess.run(
        [sys.executable, "-m", "wildmerge.cli", "sample", "--pool", str(root / "pool.yml"), "--sizes", "2", "--k", "1",
         "--methods", "ta,ties,tsv_m,iso_c", "--ablation", "ties_density", "--evaluate", "--suite",
         str(root / "mini.yml"), "--out", str(run)],
        capture_output=True, text=True, env={**__import__("os").environ, "TQDM_DISABLE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "merges: 0 new, 0 redone, 18 already done" in out.stdout, out.stdout
    assert "22 model(s) -> 22 distinct job(s): 22 already done, 0 to run" in out.stdout, out.stdout
    plan_after = json.loads((run / "plan.json").read_text())
    assert [e["model_id"] for e in plan_after["entries"]] == [e["model_id"] for e in plan_before["entries"]]
    scores = (run / "report" / "scores.csv").read_text().splitlines()
    assert len(scores) == 1 + 22
