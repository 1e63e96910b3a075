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


def cost_points(store: ResultStore, df, merge_seconds: dict):
    """Per method variant: mean merge seconds, mean evaluation seconds and mean suite accuracy of its merges (what
    one model of a method costs against what it gives). ``merge_seconds``: model id -> seconds from its merge
    record."""
    import pandas as pd

    rows = []
    ok = df[(df["status"] == "ok") & (df["kind"] == "merge")]
    for variant in dict.fromkeys(ok["variant"]):
        sub = ok[ok["variant"] == variant]
        evals = [store.load(j).get("seconds") for j in sub["job_id"] if j]
        merges = [merge_seconds.get(m) for m in sub["model_id"]]
        evals, merges = [s for s in evals if s is not None], [s for s in merges if s is not None]
        rows.append({"variant": variant, "k": len(sub), "mean": float(sub["mean"].mean()),
                     "merge_seconds": sum(merges) / len(merges) if merges else float("nan"),
                     "eval_seconds": sum(evals) / len(evals) if evals else float("nan")})
    return pd.DataFrame(rows, columns=["variant", "k", "mean", "merge_seconds", "eval_seconds"])


def merge_seconds(entries) -> dict:
    """Model id -> seconds its merge took (its ``merge_info.json``), for the merges that record it."""
    from wildmerge.run import read_merge_info

    out = {}
    for e in entries:
        info = read_merge_info(e.path) if e.kind == "merge" else None
        if info is not None and info.seconds is not None:
            out[e.model_id] = info.seconds
    return out
