"""One row per model of a run with its per-task accuracies (percent) and their mean: the table everything reads.

A model whose result is missing, failed, corrupt or lacks a task of the suite gets ``status != ok`` and empty
scores: it is listed, never averaged in.
"""

import json
from typing import Dict, List, Optional, Tuple

import yaml

from wildmerge.analysis.report.run_data import RunData
from wildmerge.errors import WildmergeError
from wildmerge.eval.splits import score_key
from wildmerge.eval.store import OK, ResultStore
from wildmerge.recipes.labels import display_rank, method_label

# which part of the study a merge belongs to (a sweep point's group keeps its scores.csv name, "ablation")
MAIN, SWEEP, TUNED = "main", "ablation", "tuned"
VAL_MEAN = "val_mean"  # mean over the suite's validation splits (``eval/splits.py``); NaN where there are none




def _variants(rows: List[Dict]) -> None:
    """Name each (method, hyperparameters) pair; hyperparameters appear only where a method has several.

    The main protocol's merges (the method recipe's own settings) keep the plain method label, so sweep points and
    tuned variants never share a name (or a table row) with them."""
    by_method: Dict[str, set] = {}
    for r in rows:
        if r["kind"] == "merge":
            by_method.setdefault(r["method"], set()).add(r["hparams"])
    for r in rows:
        if r["kind"] != "merge":
            r["variant"] = method_label(r["method"]) if r["kind"] == "composition" else r["kind"]
            continue
        label = method_label(r["method"])
        if r["group"] != MAIN and len(by_method[r["method"]]) > 1:
            all_hp = [json.loads(h) for h in by_method[r["method"]]]
            keys = sorted({k for hp in all_hp for k in hp if len({json.dumps(h.get(k)) for h in all_hp}) > 1})
            hp = json.loads(r["hparams"])
            label += " (" + ", ".join(f"{k}={hp.get(k)}" for k in keys) + ")"
        r["variant"] = label


def _group(entry) -> str:
    """main: the protocol's merges at the recipe's settings; ablation: a point of a sweep (the sweep
    point at the recipe's settings is also main); tuned: other non-default settings."""
    if entry.kind != "merge" or not entry.overrides:
        return MAIN
    return SWEEP if entry.ablations else TUNED


def main_merges(df):
    """The merges behind Tables 1-3 and accuracy vs n: main group, random subsets (not one domain's experts)."""
    return df[(df["kind"] == "merge") & (df["group"] == MAIN) & (df["domain"].fillna("") == "")]


def protocol_rows(df):
    """Base, experts and main merges: what Tables 1-3 and the accuracy-vs-n plots read."""
    keep = (df["kind"] != "merge") | df.index.isin(main_merges(df).index)
    return df[keep]


SCREENING_COLUMNS = ["screened", "vs_base_diff", "vs_base_low", "vs_base_high", "vs_best_diff", "vs_best_low",
                     "vs_best_high"]


def screening_columns(info: Optional[Dict]) -> Dict:
    """A screened evaluation's record (``wildmerge.eval.screening.stages``): whether the score rests on the screening subset
    only, and the paired bootstrap intervals (points) of the difference to the base and to the best expert."""
    if not info:
        return {}
    out = {"screened": info.get("stage") == "screened"}
    for ref in ("vs_base", "vs_best"):
        if info.get(ref):
            out[f"{ref}_diff"], out[f"{ref}_low"], out[f"{ref}_high"] = info[ref]
    return out


def overridden_text(settings: Optional[Dict]) -> str:
    """``limit=2;batch_size=8``: the evaluation settings a command overrode for a job ('' for the suite's own)."""
    return ";".join(f"{k}={v}" for k, v in sorted((settings or {}).items()))


def validation_scores(scores: Dict, columns: List[str]) -> Dict:
    """A result's validation-split scores (percent) and their mean, ``val_mean``; nothing when it lacks one."""
    if not columns or any(c not in scores for c in columns):
        return {}
    values = {c: 100.0 * float(scores[c]) for c in columns}
    return {**values, VAL_MEAN: sum(values.values()) / len(values)}


def lower_is_better(run, suite: str) -> List[str]:
    """The task columns of ``suite`` whose metric is lower-is-better (perplexity ...), read from the suite file the
    run was scored with (``eval.suites.higher_is_better``: the suite's ``higher_is_better``, else lm-eval's)."""
    from wildmerge.eval.suites import higher_is_better

    data = RunData.of(run)
    try:
        tasks = yaml.safe_load(ResultStore(data.run.eval_dir(suite)).suite_file.read_text())["tasks"]
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        return []  # collect_scores names the damaged file
    return [t.get("label") or t["task"] for t in tasks
            if not higher_is_better(t.get("metric", "acc,none"), t.get("higher_is_better"))]


def validation_columns(df) -> List[str]:
    """The validation-split score columns of a ``collect_scores`` frame (``add@validation``...)."""
    return [c for c in df.columns if "@" in str(c)]


def collect_scores(run, suite: Optional[str] = None) -> Tuple["object", List[str], List[str]]:
    """(DataFrame, task column names, notes) for ``suite`` of the run (a folder or its ``RunData``); scores in
    percent."""
    import pandas as pd

    data = RunData.of(run)
    suite = data.pick_suite(suite)
    store = ResultStore(data.run.eval_dir(suite))
    stored = data.indexes[suite]
    index = stored.models
    rebuild = (f"rerun `wildmerge eval {data.root} --suite {stored.suite_source or suite}` to rewrite it "
               f"(finished jobs are not run again)")
    if not index:
        raise WildmergeError(f"{store.index_path} is damaged or empty; {rebuild}")
    try:
        suite_data = yaml.safe_load(store.suite_file.read_text())
        tasks = [t.get("label") or t["task"] for t in suite_data["tasks"]]
        validation = [score_key(t.get("label") or t["task"], t["validation_split"]) for t in suite_data["tasks"]
                      if t.get("validation_split")]
    except (OSError, yaml.YAMLError, TypeError, KeyError, AttributeError) as exc:
        raise WildmergeError(f"{store.suite_file} is damaged ({type(exc).__name__}); {rebuild}") from None
    notes, rows = [], []
    for e in data.plan.entries:
        row = {"model_id": e.model_id, "kind": e.kind, "method": e.method or "",
               "method_label": method_label(e.method), "n": e.n, "subset_id": e.subset_id,
               "hparams": json.dumps(e.hparams, sort_keys=True), "experts": ";".join(e.experts),
               "job_id": index.get(e.model_id, ""), "status": "not evaluated", "error": "",
               "group": _group(e), "domain": e.domain or "", "ablations": ";".join(e.ablations),
               "overrides": json.dumps(e.overrides, sort_keys=True),
               "overridden": overridden_text(stored.jobs.get(index.get(e.model_id, ""), {}).get("overridden"))}
        record = store.load(row["job_id"]) if row["job_id"] else {"status": "not evaluated", "error": ""}
        row["status"], row["error"] = record["status"], (record.get("error") or "").split("\n")[0]
        if record["status"] == OK:
            missing = [t for t in tasks if t not in record.get("scores", {})]
            if missing:
                row["status"], row["error"] = "incomplete", f"result lacks task(s) {missing}; rerun the evaluation"
            else:
                for t in tasks:
                    row[t] = 100.0 * float(record["scores"][t])
                row["mean"] = sum(row[t] for t in tasks) / len(tasks)
                row.update(validation_scores(record["scores"], validation))
                row.update(screening_columns(record.get("screening")))
        if row["status"] != OK:
            notes.append(f"{e.model_id} ({e.kind}) has no score: {row['status']}: {row['error']}")
        rows.append(row)
    _variants(rows)
    df = pd.DataFrame(rows)
    for col in tasks + ["mean", VAL_MEAN] + validation + SCREENING_COLUMNS[1:]:
        if col not in df:
            df[col] = float("nan")
    df["screened"] = df["screened"].map(lambda v: v is True) if "screened" in df else False
    df["n"] = pd.to_numeric(df["n"], errors="coerce")
    df["_kind"] = df["kind"].map({"base": 0, "expert": 1, "merge": 2, "composition": 3})
    df["_method"] = df["method"].map(display_rank)
    df = df.sort_values(["_kind", "_method", "variant", "n", "model_id"], kind="stable").drop(columns=["_kind",
                                                                                                       "_method"])
    return df.reset_index(drop=True), tasks, notes
