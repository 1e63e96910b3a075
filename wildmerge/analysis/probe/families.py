"""The probe over model seeds as the fresh-head probe paper ran it (Tables 5 and 6): one run per family trained from
its own seed (for Table 6, the partition family of one random skill partition per seed), each probed against that
family's own joint reference; the tables are read from the runs' probe records (``RUN/probe/<suite>/probe.json``).

Per seed: N, FH, J and R = (FH - N) / (J - N) (left missing when J - N <= ``MIN_HEADROOM``), the run's value being
its mean over head seeds. Over seeds: mean ± sample SD (ddof = 1) and the headline R, the ratio of the means
(``seeds.aggregate_probe``). Runs that share a family or a joint reference, or mix partitions, are refused: a model
seed is a family of its own.
"""

import json
import math
from pathlib import Path
from typing import List, Sequence

from wildmerge.analysis.markdown import markdown_table
from wildmerge.analysis.probe.metrics import gap_metrics
from wildmerge.analysis.probe.seeds import _cell, _clean, _csv, _finite, aggregate_probe
from wildmerge.errors import ConfigError

PER_SEED_COLUMNS = ["partition", "model_seed", "run", "model_id", "kind", "method", "task", "readout", "native",
                    "fresh_head", "joint", "recovered", "reference"]
SUMMARY_COLUMNS = ["partition", "model_id", "kind", "method", "task", "readout", "model_seeds", "native_mean",
                   "native_sd", "fresh_head_mean", "fresh_head_sd", "joint_mean", "joint_sd", "recovered_mean",
                   "recovered_sd", "recovered_ratio_of_means", "status"]


def run_family(run_dir) -> dict:
    """The demo family a run merged from (its base's ``family.json``): ``root``, ``seed``, ``partition``; {} for a
    run of another pool."""
    from wildmerge.run import RunFolder

    base = next((e.path for e in RunFolder(run_dir).read_plan().entries if e.kind == "base"), None)
    manifest = Path(base).parent / "family.json" if base else None
    if manifest is None or not manifest.is_file():
        return {}
    record = json.loads(manifest.read_text())
    return {"root": str(manifest.parent), "seed": record.get("seed"),
            "partition": (record.get("partition") or {}).get("name")}


def load_record(run_dir, suite: str) -> dict:
    """A run's probe record for ``suite``, refused with the command to make it when missing or made without J."""
    from wildmerge.run import RunFolder

    path = RunFolder(run_dir).probe_dir(suite) / "probe.json"
    make = f"wildmerge analyze probe {run_dir} --suite {suite} --reference J (demo families: --reference demo:joint)"
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no probe record for suite {suite!r} ({path}); probe it first: {make}")
    record = json.loads(path.read_text())
    if not record.get("reference"):
        raise ConfigError(f"{path} was probed without a joint reference: R needs the family's own J; {make}")
    return record


def _check(runs: Sequence[str], families: List[dict], records: List[dict]) -> None:
    if len(runs) < 2:
        raise ConfigError("give at least two run folders, one per model seed (a family built from its own seed)")
    if len(set(map(str, runs))) < len(runs):
        raise ConfigError("a run folder is given twice: each run is one model seed")
    for what, keys in (("joint reference", [r["reference"] for r in records]),
                       ("family", [f.get("root") for f in families if f.get("root")])):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ConfigError(f"runs share one {what} ({twice[0]}): a model seed is a family of its own, trained "
                              f"from its own seed with its own joint reference (WILDMERGE_DEMO_SEED per run)")
    partitions = {f.get("partition") for f in families}
    if len(partitions) > 1:
        raise ConfigError(f"the runs come from different partitions ({sorted(map(str, partitions))}): one table per "
                          f"partition, as the paper's Table 6 keeps its splits apart")


def per_seed_rows(run: str, family: dict, record: dict) -> List[dict]:
    """One row per probed (model, task) of one run: N, FH (mean over head seeds), J and R of that seed."""
    out = []
    for r in record["rows"]:
        if not (_finite(r.get("native")) and _finite(r.get("fresh_head_mean"))):
            continue
        joint = r.get("joint") if _finite(r.get("joint")) else None
        recovered = gap_metrics(r["native"], r["fresh_head_mean"], joint)["recovered"]
        out.append({"partition": family.get("partition") or "", "run": str(run),
                    "model_seed": family["seed"] if family.get("seed") is not None else Path(run).name,
                    **{k: r.get(k) for k in ("model_id", "kind", "method", "task", "readout")},
                    "native": r["native"], "fresh_head": r["fresh_head_mean"], "joint": joint,
                    "recovered": recovered if math.isfinite(recovered) else None, "reference": record["reference"]})
    return out


def probe_over_families(runs: Sequence[str], suite: str) -> tuple:
    """(per-seed rows, summary rows) of the runs' probe records, each run one model seed with its own J."""
    families = [run_family(r) for r in runs]
    records = [load_record(r, suite) for r in runs]
    _check(runs, families, records)
    per_run = [per_seed_rows(r, f, rec) for r, f, rec in zip(runs, families, records)]
    partition = families[0].get("partition") or ""
    summary = [{"partition": partition, **row} for row in aggregate_probe(
        [[{**r, "fresh_head_mean": r["fresh_head"]} for r in rows] for rows in per_run])]
    return [r for rows in per_run for r in rows], summary


def _number(x) -> str:
    return f"{x:.4f}" if _finite(x) else "-"


def families_markdown(per_seed: List[dict], summary: List[dict]) -> str:
    partition = (summary or per_seed or [{}])[0].get("partition") or ""
    table = "6 (random partition " + partition + ")" if partition else "5"
    lines = [f"Table {table} analogue (the fresh-head probe paper): per model seed, a family trained from that seed "
             f"with its own joint reference J; R = (FH - N) / (J - N) with that seed's J.", ""]
    for task in dict.fromkeys(r["task"] for r in per_seed):
        rows = [[r["model_id"], r["model_seed"], _number(r["native"]), _number(r["fresh_head"]), _number(r["joint"]),
                 _number(r["recovered"])] for r in per_seed if r["task"] == task]
        lines += [f"### {task}", "", markdown_table(rows, ["Method", "Seed", "Native", "Fresh-head", "Joint reference",
                                                           "Recovered fraction"], align=["left"] + ["right"] * 5), ""]
        rows = [[r["model_id"], r.get("model_seeds", 0), _cell(r, "native"), _cell(r, "fresh_head"),
                 _cell(r, "joint"), _cell(r, "recovered"),
                 _number(r.get("recovered_ratio_of_means"))] for r in summary if r["task"] == task]
        lines += ["Mean ± SD over the seeds (ddof = 1); R (ratio) = (mean FH - mean N) / (mean J - mean N):", "",
                  markdown_table(rows, ["Method", "seeds", "N", "FH", "J", "R (per seed)", "R (ratio)"],
                                 align=["left"] + ["right"] * 6), ""]
    return "\n".join(lines)


def write_families(per_seed: List[dict], summary: List[dict], out_dir, runs: Sequence[str]) -> List[Path]:
    """``families.csv`` (per seed), ``families_summary.csv``, ``families.md`` and ``families.json``."""
    from wildmerge.atomic import write_json, write_text

    out_dir = Path(out_dir)
    return [write_text(out_dir / "families.csv", _csv(per_seed, PER_SEED_COLUMNS)),
            write_text(out_dir / "families_summary.csv", _csv(summary, SUMMARY_COLUMNS)),
            write_text(out_dir / "families.md", families_markdown(per_seed, summary)),
            write_json(out_dir / "families.json", {"runs": [str(r) for r in runs], "per_seed": _clean(per_seed),
                                                   "summary": _clean(summary)})]
