"""What a run's evaluation cost: wall seconds per method and model size, from each result record, to budget the
next run. A job shared by several models (the same weights) is counted once, for the first of them."""

from wildmerge.analysis.markdown import markdown_table
from wildmerge.eval.store import ResultStore


def cost_markdown(store: ResultStore, df) -> str:
    """A Markdown section: evaluation seconds per (variant, n), the devices, and the run's total."""
    seen, rows = set(), {}
    for model_id, job_id, variant, n in zip(df["model_id"], df["job_id"], df["variant"], df["n"]):
        if not job_id or job_id in seen:
            continue
        seen.add(job_id)
        record = store.load(job_id)
        if "seconds" not in record:
            continue
        key = (variant, "" if n != n else int(n))  # n is NaN for the base
        row = rows.setdefault(key, {"jobs": 0, "seconds": 0.0, "devices": set()})
        row["jobs"] += 1
        row["seconds"] += float(record["seconds"])
        row["devices"].add(record.get("device") or "not recorded")
    if not rows:
        return ""
    table = markdown_table([[variant, n, row["jobs"], f"{row['seconds']:.1f}", f"{row['seconds'] / row['jobs']:.1f}",
                             ", ".join(sorted(row["devices"]))] for (variant, n), row in rows.items()],
                           ["model", "n", "jobs", "eval seconds", "s / job", "device"])
    jobs, seconds = sum(r["jobs"] for r in rows.values()), sum(r["seconds"] for r in rows.values())
    return ("## Evaluation cost\n\nWall seconds per scored model (load and score, as each result records them); "
            f"total **{seconds:.0f} s for {jobs} job(s)**, {seconds / jobs:.1f} s per job.\n\n" + table)
