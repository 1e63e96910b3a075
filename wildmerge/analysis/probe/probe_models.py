"""The fresh-head probe over the models of a run (the fresh-head probe paper): is the experts' knowledge still in a merge's features?

For every model and every probe-able task of a suite: native accuracy N (the model's own readout on the test
split), fresh-head accuracy FH (a new linear head on the frozen last-token features, one per seed), and with a
joint reference J the gap quantities (``metrics.py``). Rows say whether the contrast is matched (the native readout
is one linear layer over the same feature) or unmatched, and which estimand each number is.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tqdm.auto import tqdm

from wildmerge.analysis.markdown import markdown_table
from wildmerge.analysis.probe.metrics import ESTIMANDS, HeadSettings, accuracy, aggregate, train_fresh_head

MATCHED = "matched: native readout = lm_head rows of single-token labels over the same feature"
UNMATCHED = ("unmatched: some label is several tokens, so the native score is a sum of token log-likelihoods, not "
             "one linear layer over the probed feature")


@dataclass
class ProbeModel:
    model_id: str
    path: str
    kind: str = "model"
    method: str = ""
    n: Optional[int] = None
    extra: Dict = field(default_factory=dict)


def native_accuracy(data: dict) -> float:
    return accuracy(data["test"]["scores"], data["test"]["labels"])


def probe_one(data: dict, n_labels: int, seeds: Sequence[int], settings: HeadSettings) -> dict:
    """N, and FH / validation accuracy / chosen epoch for each seed, from one model's cached features."""
    split = lambda s: (data[s]["features"], data[s]["labels"])  # noqa: E731
    fits = [train_fresh_head(split("train"), split("validation"), split("test"), n_labels, seed, settings)
            for seed in seeds]
    return {"native": native_accuracy(data), "matched": bool(data["matched"]), "fh": [f["fh"] for f in fits],
            "val": [f["val"] for f in fits], "epoch": [f["epoch"] for f in fits]}


def _fmt(x: float) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)


def row_for(model: ProbeModel, task, result: Optional[dict], joint: Optional[float], seeds, why: str = "") -> dict:
    row = {"model_id": model.model_id, "kind": model.kind, "method": model.method, "n": model.n,
           "task": task.label if hasattr(task, "label") else task, "status": "ok" if result else f"missing: {why}"}
    if not result:
        return row
    stats = aggregate([result["native"]] * len(seeds), result["fh"],
                      [joint] * len(seeds) if joint is not None else None)
    row.update({
        "readout": "matched" if result["matched"] else "unmatched", "native": result["native"],
        "fresh_head_mean": stats["fresh_head_mean"], "fresh_head_sd": stats["fresh_head_sd"],
        "joint": joint if joint is not None else float("nan"),
        "delta_rr_mean": stats["delta_rr_mean"], "delta_rr_sd": stats["delta_rr_sd"],
        "recovered_mean": stats["recovered_mean"], "recovered_sd": stats["recovered_sd"],
        "recovered_ratio_of_means": stats["recovered_ratio_of_means"],
        "residual_mean": stats["residual_mean"], "residual_sd": stats["residual_sd"],
        "seeds": json.dumps(list(seeds)), "fresh_head_per_seed": json.dumps([round(x, 6) for x in result["fh"]]),
        "best_epoch_per_seed": json.dumps(result["epoch"]),
    })
    if joint is None:
        row["status"] = "ok (no joint reference: R and U missing; pass --reference)"
    elif math.isnan(stats["recovered_ratio_of_means"]):
        row["status"] = "ok (J - N <= 0.01: R undefined)"
    return row


def run_probe(models: List[ProbeModel], tasks: dict, skipped: Dict[str, str], cache_root, *, reference=None,
              seeds=(0, 1, 2), device="cpu", batch_size=32, max_memory_gib=None,
              settings: HeadSettings = HeadSettings(), fingerprint=None) -> List[dict]:
    """One row per (model, task); tasks in ``skipped`` and models that fail get rows marked missing with why."""
    from wildmerge.analysis.probe.features import features_for
    from wildmerge.errors import WildmergeError

    fingerprint = fingerprint or _fingerprint
    joint: Dict[str, float] = {}
    if reference is not None:
        data = features_for(reference, fingerprint(reference), tasks, cache_root, device, batch_size, max_memory_gib)
        joint = {name: native_accuracy(d) for name, d in data.items()}
    rows = []
    for model in tqdm(models, desc="fresh-head probe", unit="model"):
        try:
            data = features_for(model.path, fingerprint(model.path), tasks, cache_root, device, batch_size,
                                max_memory_gib)
        except WildmergeError as exc:
            rows += [row_for(model, t, None, None, seeds, str(exc).splitlines()[0]) for t in tasks.values()]
            continue
        for name, task in tasks.items():
            result = probe_one(data[name], len(task.labels), seeds, settings)
            rows.append(row_for(model, task, result, joint.get(name), seeds))
        rows += [row_for(model, name, None, None, seeds, why) for name, why in skipped.items()]
    return rows


def _fingerprint(path: str) -> str:
    from wildmerge.eval.fingerprint import fingerprint_model

    return fingerprint_model(path)


# --- outputs -----------------------------------------------------------------------------------------------------

COLUMNS = ["model_id", "kind", "method", "n", "task", "readout", "native", "fresh_head_mean", "fresh_head_sd", "joint",
           "delta_rr_mean", "delta_rr_sd", "recovered_mean", "recovered_sd", "recovered_ratio_of_means",
           "residual_mean", "residual_sd", "seeds", "fresh_head_per_seed", "best_epoch_per_seed", "status"]


def to_csv(rows: List[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: _fmt(v) if isinstance(v, float) else v for k, v in r.items()})
    return buf.getvalue()


_NEEDS_J = ("joint", "recovered_mean", "recovered_ratio_of_means", "residual_mean")


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(x)


def _cell(r: dict, key: str, sd: str = "") -> str:
    x = r.get(key)
    if x is None or (isinstance(x, float) and math.isnan(x)):
        if "native" in r and key in _NEEDS_J and not _finite(r.get("joint")):
            return "- (no joint reference J: pass --reference)"  # R and U are gaps to J; without J they are empty
        return "-"
    s = r.get(sd) if sd else None
    return f"{x:.3f}" + (f" ± {s:.3f}" if isinstance(s, float) and not math.isnan(s) else "")


def to_markdown(rows: List[dict], seeds: Sequence[int]) -> str:
    """One table per task; every number names its estimand underneath; missing cells say why."""
    lines = [f"Fresh-head probe (the fresh-head probe paper). FH, R, U: mean ± SD over head seeds {list(seeds)} (ddof = 1); "
             f"R (ratio) = (mean FH - N) / (J - N), the paper's headline.", ""]
    for task in dict.fromkeys(r["task"] for r in rows):
        sub = [r for r in rows if r["task"] == task]
        readouts = {r.get("readout") for r in sub if r.get("readout") in ("matched", "unmatched")}
        table = markdown_table(
            [[r["model_id"], r["kind"], _cell(r, "native"), _cell(r, "fresh_head_mean", "fresh_head_sd"),
              _cell(r, "joint"), _cell(r, "delta_rr_mean", "delta_rr_sd"), _cell(r, "recovered_mean", "recovered_sd"),
              _cell(r, "recovered_ratio_of_means"), _cell(r, "residual_mean", "residual_sd"), r["status"]]
             for r in sub],
            ["model", "kind", "N", "FH", "J", "FH - N", "R (per seed)", "R (ratio)", "U", "status"],
            align=["left", "left"] + ["right"] * 7 + ["left"])
        lines += [f"### {task}" + (f" ({', '.join(sorted(readouts))})" if readouts else ""), "", table]
    if any(r.get("readout") == "unmatched" for r in rows):
        lines += [f"Unmatched tasks: {UNMATCHED}.", ""]
    lines += [f"Matched tasks: {MATCHED}.", "", "What each number is (and is not):"]
    for name, (estimand, not_identified) in ESTIMANDS.items():
        lines.append(f"- {name}: `{estimand}`; does not identify {not_identified}.")
    return "\n".join(lines) + "\n"


def plot(rows: List[dict], out_base: Path) -> List[Path]:
    """Fig. 1 style: per task, native and fresh-head bars for every model, the joint reference as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nan = float("nan")
    ok = [{"fresh_head_mean": nan, "fresh_head_sd": nan, "joint": nan, **r} for r in rows if r.get("native") is not None]
    tasks = list(dict.fromkeys(r["task"] for r in ok))
    if not tasks:
        return []
    fig, axes = plt.subplots(len(tasks), 1, figsize=(max(6, 0.5 * len(ok) / len(tasks) + 3), 2.8 * len(tasks)),
                             squeeze=False)
    for ax, task in zip(axes[:, 0], tasks):
        sub = [r for r in ok if r["task"] == task]
        xs = range(len(sub))
        ax.bar([x - 0.2 for x in xs], [r["native"] for r in sub], 0.4, label="native N")
        ax.bar([x + 0.2 for x in xs], [r["fresh_head_mean"] for r in sub], 0.4,
               yerr=[0 if math.isnan(r["fresh_head_sd"]) else r["fresh_head_sd"] for r in sub], label="fresh head FH")
        joint = [r["joint"] for r in sub if not math.isnan(r["joint"])]
        if joint:
            ax.axhline(joint[0], color="k", ls="--", lw=1, label="joint J")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["model_id"] for r in sub], rotation=60, ha="right", fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task} ({sub[0].get('readout', '')})", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        path = out_base.with_suffix(f".{ext}")
        tmp = path.with_name(f".{path.name}.tmp")
        fig.savefig(tmp, format=ext, dpi=120)
        tmp.replace(path)
        paths.append(path)
    plt.close(fig)
    return paths


def write_outputs(rows: List[dict], out_dir, seeds, reference: Optional[str] = None) -> List[Path]:
    """``probe.csv / .md / .json`` (the JSON names the joint reference J the rows were scored against) and the
    Fig. 1 plot."""
    from wildmerge.atomic import write_json, write_text

    out_dir = Path(out_dir)
    clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]
    paths = [write_text(out_dir / "probe.csv", to_csv(rows)), write_text(out_dir / "probe.md", to_markdown(rows, seeds)),
             write_json(out_dir / "probe.json", {"seeds": list(seeds), "reference": reference, "estimands": ESTIMANDS,
                                                       "rows": clean})]
    return paths + plot(rows, out_dir / "probe_fig1")


def summary_markdown(rows: List[dict]) -> str:
    """One line per model, ``N / FH / R (ratio)`` per task: the compact table of the README's proof."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    by = {(r["model_id"], r["task"]): r for r in rows}
    models = list(dict.fromkeys(r["model_id"] for r in rows))
    rows = [[m] + [f"{_cell(r, 'native')} / {_cell(r, 'fresh_head_mean')} / {_cell(r, 'recovered_ratio_of_means')}"
                   for r in (by.get((m, t), {}) for t in tasks)] for m in models]
    return markdown_table(rows, ["model"] + [f"{t} N / FH / R" for t in tasks])
