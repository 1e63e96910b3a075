"""The report's evaluation cost section (hand-summed seconds per method and size) and the warning at the top of a
report whose base or expert has no score."""

import json

from report_fixtures import fabricate_run
from wildmerge.analysis.report.write import write_report
from wildmerge.eval.store import read_result, write_result


def _add_costs(run):
    """Give every readable result wall seconds (merges 2 s per n, the others 1 s) and a device."""
    for path in sorted((run / "eval" / "mini" / "results").glob("*.json")):
        record = read_result(path)
        if record["status"] in ("ok", "failed"):
            mid = record["job_id"].removeprefix("mini-")
            merge = mid.startswith(("ta_", "ties_"))
            write_result(path, {**record, "seconds": 2.0 * int(mid.split("_")[1]) if merge else 1.0,
                                "device": "cpu"})


def test_costs_per_method_and_size_and_total(tiny_family, tmp_path):
    run = fabricate_run(tmp_path / "run", tiny_family)
    _add_costs(run)
    write_report(run)
    md = (run / "report" / "leaderboard.md").read_text()
    # base 1 + experts 3 x 1 + TA n=2: 3 x 4 + TA n=3: 6 + TIES n=2: 2 x 4 (ok + failed); TIES n=3 is corrupt
    assert "total **30 s for 10 job(s)**" in md
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:4]) for line in md.splitlines()
            if line.startswith("| ") and line.rstrip("| ").endswith("cpu")}
    assert ("TA", "2", "3", "12.0") in rows and ("TA", "3", "1", "6.0") in rows and ("TIES", "2", "2", "8.0") in rows
    assert ("expert", "1", "3", "3.0") in rows and "Incomplete" not in md


def test_missing_base_and_expert_are_named_at_the_top(tiny_family, tmp_path):
    run = fabricate_run(tmp_path / "run", tiny_family, base_scores=False)
    result = run / "eval" / "mini" / "results" / "mini-e2.json"
    write_result(result, {**json.loads(result.read_text()), "status": "failed", "error": "killed"})
    write_report(run)
    md = (run / "report" / "leaderboard.md").read_text()
    top = md.split("## ")[0]
    assert "Incomplete: base without a score: `base` (failed)" in top
    assert "Incomplete: expert without a score: `e2` (failed)" in top
