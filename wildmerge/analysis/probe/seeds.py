"""The probe's tables over runs (the fresh-head probe paper, Sec. 4: mean ± sample SD, ddof = 1, deltas per seed
before aggregation) and the geometry table and figure (Tables 2 and 7, Fig. 2).

Here a run is a subset draw: the same command on runs sampled with different ``--seed`` values, one joint reference
for all (model seeds, families trained from their own seeds each with its own joint reference, are ``families.py``). A row is the same model
id and task in every run (``ta__n02_s00`` is the first TA subset of size 2, whichever experts its seed drew); each
run's value is its mean over head seeds. The headline R is the ratio of the means over model seeds.
"""

import json
import math
from pathlib import Path
from typing import List, Sequence

from wildmerge.analysis.markdown import markdown_table
from wildmerge.analysis.probe.metrics import aggregate, mean_sd

SEED_COLUMNS = ["model_id", "kind", "method", "n", "task", "readout", "model_seeds", "native_mean", "native_sd",
                "fresh_head_mean", "fresh_head_sd", "joint_mean", "joint_sd", "delta_rr_mean", "delta_rr_sd",
                "recovered_mean", "recovered_sd", "recovered_ratio_of_means", "residual_mean", "residual_sd",
                "native_per_seed", "fresh_head_per_seed", "status"]
GEOMETRY_COLUMNS = ["model_id", "kind", "method", "n", "task", "partition", "sizes", "class_sets", "seeds",
                    "composer_mean", "composer_sd", "ensemble_mean", "ensemble_sd", "delta_mean", "delta_sd", "composer_per_seed",
                    "ensemble_per_seed", "delta_per_seed", "status"]
TABLES_5_6 = ("Tables 5-6 over model seeds (the fresh-head probe paper): N, FH, J, FH - N, R and U as mean ± SD "
              "(ddof = 1) over {over}; gaps per seed before aggregation; R (ratio) = (mean FH - mean N) / "
              "(mean J - mean N), the paper's headline.")
TABLES_2_7 = ("Tables 2 and 7 (the fresh-head probe paper's geometry boundary): composer and ensemble of T head "
              "experts, one per class set, on each model's frozen features; mean ± SD (ddof = 1) over {over}; "
              "Composer - Ensemble per seed before aggregation.")


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _groups(per_run: Sequence[List[dict]], keys) -> dict:
    groups = {}
    for rows in per_run:
        for r in rows:
            groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return groups


def aggregate_probe(per_run: Sequence[List[dict]]) -> List[dict]:
    """Probe rows of several runs -> one row per (model, task) over the runs where it was probed."""
    out = []
    for (model_id, task), rows in _groups(per_run, ("model_id", "task")).items():
        first = rows[0]
        row = {k: first.get(k) for k in ("model_id", "kind", "method", "n", "task")}
        ok = [r for r in rows if _finite(r.get("native"))]
        if not ok:
            out.append({**row, "model_seeds": 0, "status": first.get("status", "missing")})
            continue
        native = [r["native"] for r in ok]
        probed = [r for r in ok if _finite(r.get("fresh_head_mean"))]
        row.update({"readout": first.get("readout"), "model_seeds": len(ok), "status": "ok",
                    "native_per_seed": json.dumps([round(x, 6) for x in native])})
        if len(probed) < len(ok):  # compositions: N only (no single feature to probe)
            row["native_mean"], row["native_sd"] = mean_sd(native)
            out.append(row)
            continue
        fresh = [r["fresh_head_mean"] for r in ok]
        joint = [r["joint"] for r in ok] if all(_finite(r.get("joint")) for r in ok) else None
        row.update(aggregate(native, fresh, joint))
        row["fresh_head_per_seed"] = json.dumps([round(x, 6) for x in fresh])
        if joint is None:
            row["status"] = "ok (no joint reference: R and U missing; pass --reference)"
        out.append(row)
    return out


def aggregate_geometry(per_run: Sequence[List[dict]]) -> List[dict]:
    """Geometry rows of several runs -> one row per (model, task, partition); each run counts once (its head-seed
    mean), and the delta is taken per run before aggregation."""
    out = []
    for key, rows in _groups(per_run, ("model_id", "task", "partition")).items():
        first = rows[0]
        row = {k: first.get(k) for k in ("model_id", "kind", "method", "n", "task", "partition")}
        ok = [r for r in rows if r.get("status") == "ok"]
        if not ok:
            out.append({**row, "status": first.get("status", "missing")})
            continue
        same = len({r.get("class_sets") for r in ok}) == 1  # one router per pool: the runs share their partitions
        for key in ("sizes", "class_sets"):
            row[key] = ok[0].get(key) if same else json.dumps([json.loads(r[key]) for r in ok])
        row.update({"status": "ok", "seeds": json.dumps(list(range(len(ok))))})
        composer, ensemble = [r["composer_mean"] for r in ok], [r["ensemble_mean"] for r in ok]
        delta = [c - e for c, e in zip(composer, ensemble)]
        for name, values in (("composer", composer), ("ensemble", ensemble), ("delta", delta)):
            row[f"{name}_mean"], row[f"{name}_sd"] = mean_sd(values)
            row[f"{name}_per_seed"] = json.dumps([round(v, 6) for v in values])
        out.append(row)
    return out


def _cell(r: dict, key: str, signed: bool = False) -> str:
    x, s = r.get(f"{key}_mean"), r.get(f"{key}_sd")
    if not _finite(x):
        return "-"
    text = f"{x:+.4f}" if signed else f"{x:.4f}"
    return text + (f" ± {s:.4f}" if _finite(s) else "")


def probe_markdown(rows: List[dict], over: str) -> str:
    lines = [TABLES_5_6.format(over=over), ""]
    for task in dict.fromkeys(r["task"] for r in rows):
        sub = [r for r in rows if r["task"] == task]
        table = markdown_table(
            [[r["model_id"], r["kind"], r.get("model_seeds", 0), _cell(r, "native"), _cell(r, "fresh_head"),
              _cell(r, "joint"), _cell(r, "delta_rr", True), _cell(r, "recovered"),
              f"{r['recovered_ratio_of_means']:.4f}" if _finite(r.get("recovered_ratio_of_means")) else "-",
              _cell(r, "residual"), r["status"]] for r in sub],
            ["model", "kind", "seeds", "N", "FH", "J", "FH - N", "R (per seed)", "R (ratio)", "U", "status"],
            align=["left", "left"] + ["right"] * 8 + ["left"])
        lines += [f"### {task}", "", table]
    return "\n".join(lines) + "\n"


def geometry_markdown(rows: List[dict], over: str) -> str:
    lines = [TABLES_2_7.format(over=over), ""]
    for task in dict.fromkeys(r["task"] for r in rows):
        sub = [r for r in rows if r["task"] == task]
        table = markdown_table(
            [[r["model_id"], r["partition"], r.get("sizes", ""), _cell(r, "composer"), _cell(r, "ensemble"),
              _cell(r, "delta", True), r["status"]] for r in sub],
            ["model", "partition", "class-set sizes", "Composer", "Ensemble", "Composer - Ensemble", "status"],
            align=["left", "left", "left", "right", "right", "right", "left"])
        lines += [f"### {task}", "", table]
    return "\n".join(lines) + "\n"


def geometry_figure(rows: List[dict], out_stem: Path) -> List[Path]:
    """Fig. 2: composer and ensemble bars (mean ± SD) per model and partition, one panel per task, Δ written above."""
    from wildmerge.analysis.plotting import pyplot, save_figure

    ok = [r for r in rows if r.get("status") == "ok"]
    tasks = list(dict.fromkeys(r["task"] for r in ok))
    if not tasks:
        return []
    plt = pyplot()
    fig, axes = plt.subplots(len(tasks), 1, figsize=(max(6, 0.7 * len(ok) / len(tasks) + 3), 3 * len(tasks)),
                             squeeze=False)
    sd = lambda r, k: r[f"{k}_sd"] if _finite(r.get(f"{k}_sd")) else 0  # noqa: E731
    for ax, task in zip(axes[:, 0], tasks):
        sub = [r for r in ok if r["task"] == task]
        xs = range(len(sub))
        ax.bar([x - 0.2 for x in xs], [r["composer_mean"] for r in sub], 0.4, yerr=[sd(r, "composer") for r in sub],
               label="composer", hatch="//")
        ax.bar([x + 0.2 for x in xs], [r["ensemble_mean"] for r in sub], 0.4, yerr=[sd(r, "ensemble") for r in sub],
               label="ensemble")
        for x, r in zip(xs, sub):
            top = max(r["composer_mean"] + sd(r, "composer"), r["ensemble_mean"] + sd(r, "ensemble"))
            ax.annotate(f"Δ{r['delta_mean']:+.3f}", (x, min(1.02, top + 0.03)), ha="center", fontsize=7)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"{r['model_id']}\n{r['partition']}" for r in sub], rotation=60, ha="right", fontsize=7)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("accuracy")
        ax.set_title(f"Fig. 2 (geometry boundary): {task}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return list(save_figure(fig, out_stem).values())


def _csv(rows: List[dict], columns: List[str]) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (round(v, 6) if _finite(v) and isinstance(v, float) else "" if isinstance(v, float)
                             else v) for k, v in r.items()})
    return buf.getvalue()


def _clean(rows):
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]


def write_geometry(rows: List[dict], out_dir, over: str, meta: dict) -> List[Path]:
    """``geometry.csv / .md / .json`` and ``geometry_fig2.png / .svg``."""
    from wildmerge.atomic import write_json, write_text

    out_dir = Path(out_dir)
    return [write_text(out_dir / "geometry.csv", _csv(rows, GEOMETRY_COLUMNS)),
            write_text(out_dir / "geometry.md", geometry_markdown(rows, over)),
            write_json(out_dir / "geometry.json", {**meta, "over": over, "rows": _clean(rows)})] + \
        geometry_figure(rows, out_dir / "geometry_fig2")


def write_seeds(rows: List[dict], out_dir, runs: Sequence[str]) -> List[Path]:
    """``seeds.csv / .md / .json``: the probe over model seeds (one run each)."""
    from wildmerge.atomic import write_json, write_text

    out_dir, over = Path(out_dir), f"{len(runs)} subset draws (runs)"
    return [write_text(out_dir / "seeds.csv", _csv(rows, SEED_COLUMNS)),
            write_text(out_dir / "seeds.md", probe_markdown(rows, over)),
            write_json(out_dir / "seeds.json", {"runs": list(runs), "rows": _clean(rows)})]
