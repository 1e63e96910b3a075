"""Chain of Merges' importance weights against what they stand for (Buzzega et al., "Rethinking Layer-wise Model
Merging through Chain of Merges", arXiv 2508.21421).

- Figs. 2 / 4: each expert's omega (Eq. 6, mean over the layer groups of a merge) against its fine-tuned minus
  base accuracy gap, on its own tasks where the run knows them, else the suite mean. Pooled over merges as
  n omega_i / sum_j omega_j (1 = an even share), since a merge's omegas share one reference model and compare only
  within it.
- Fig. 6: the omega-reference ablation: omegas measured through the merged model (what CoM uses), through the
  base ("zero-shot") model, and the performance oracle (the gap), compared by correlation.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from wildmerge.errors import WildmergeError


def com_merges(data) -> List[dict]:
    """The run's merges whose layer-wise diagnostics carry importance weights: model id, dir, experts, diag."""
    from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE

    by_path = {str(Path(e.path).resolve()): (e.experts[0] if e.experts else e.model_id)
               for e in data.plan.entries if e.kind == "expert"}
    out = []
    for e in data.plan.entries:
        if e.kind != "merge":
            continue
        path = data.run.model_dir(e.model_id) / DIAGNOSTICS_FILE
        if not path.is_file():
            continue
        diag = json.loads(path.read_text())
        rows = [r for r in diag.get("layers", []) if r.get("omega")]
        if not rows:
            continue
        names = [by_path.get(str(Path(m).resolve())) for m in diag.get("models", [])]
        experts = names if all(names) and len(names) == len(e.experts) else list(e.experts)
        out.append({"model_id": e.model_id, "dir": data.run.model_dir(e.model_id), "experts": experts,
                    "diag": diag, "omega": {(int(r["layer"]), r["group"]): list(map(float, r["omega"])) for r in rows}})
    if not out:
        raise WildmergeError(f"{data.root}: no merge with importance weights (layerwise_diagnostics.json with omega); "
                             f"merge with Chain of Merges first, e.g. `wildmerge sample --methods com`")
    return out


def expert_gaps(data, suite: Optional[str] = None) -> Dict[str, float]:
    """{expert: its score minus the base's}, in points, on the expert's own tasks where known, else the suite mean."""
    from wildmerge.analysis.mergeability.targets import own_tasks_for
    from wildmerge.analysis.report.scores import collect_scores

    suite = data.pick_suite(suite)
    df, tasks, _ = collect_scores(data, suite)
    ok = df[df["status"] == "ok"]
    base = ok[ok["kind"] == "base"]
    if base.empty:
        raise WildmergeError(f"{data.root}: the base has no score for suite {suite}; the accuracy gap needs it "
                             f"(run `wildmerge eval {data.root} --suite {suite}`)")
    domains = {m.name: m.domain for m in data.manifest.models.experts} if data.manifest else {}
    own = own_tasks_for(data.manifest.pool if data.manifest else "", suite, tasks, domains)
    b = base.iloc[0]
    out = {}
    for _, r in ok[ok["kind"] == "expert"].iterrows():
        name = r["experts"] or r["model_id"]
        cols = own.get(name) or tasks
        out[name] = float(np.mean([r[t] for t in cols]) - np.mean([b[t] for t in cols]))
    return out


def mean_omega(omegas: Dict[tuple, List[float]]) -> np.ndarray:
    """Each expert's omega, mean over the layer groups."""
    return np.mean(np.array(list(omegas.values()), dtype=float), axis=0)


def shares(v: np.ndarray) -> np.ndarray:
    return v / v.sum() if v.sum() > 0 else np.full_like(v, np.nan)


def importance_table(merges: List[dict], gaps: Dict[str, float]) -> "object":
    """One row per (merge, expert): mean omega, its share in the merge (and n x share: 1 is even), and the
    expert's gap (Figs. 2 / 4)."""
    import pandas as pd

    rows = []
    for m in merges:
        om = mean_omega(m["omega"])
        for name, o, s in zip(m["experts"], om, shares(om)):
            rows.append({"model_id": m["model_id"], "expert": name, "omega": float(o), "omega_share": float(s),
                         "omega_rel": float(s * len(om)), "gap": gaps.get(name, float("nan"))})
    return pd.DataFrame(rows)


def correlations(x, y) -> dict:
    """Pearson and Spearman r with the number of points; NaN when fewer than 3 or a side is constant."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return {"n": int(len(x)), "pearson": float("nan"), "spearman": float("nan")}
    return {"n": int(len(x)), "pearson": float(np.corrcoef(x, y)[0, 1]), "spearman": float(spearmanr(x, y)[0])}


def gap_summary(table) -> dict:
    """Per expert (shares averaged over its merges) and pooled over (merge, expert) rows."""
    per = table.groupby("expert", sort=False).agg(omega_rel=("omega_rel", "mean"), gap=("gap", "first"),
                                                  merges=("model_id", "count")).reset_index()
    return {"per_expert": per, "r_per_expert": correlations(per["omega_rel"], per["gap"]),
            "r_pooled": correlations(table["omega_rel"], table["gap"])}


def reference_ablation(merges: List[dict], gaps: Dict[str, float], device: str = "cpu") -> "object":
    """Fig. 6: per (merge, expert) the omega share under the merged reference (CoM), the base reference and the
    oracle gap; plus per merge the correlation of the two references over every (layer group, expert)."""
    import pandas as pd

    from wildmerge.plugins.layerwise.driver import recipe_calibration
    from wildmerge.plugins.layerwise.reference import reference_omegas

    rows = []
    for m in merges:
        cal = recipe_calibration(m["dir"] / "mergekit_config.yml")
        if not cal["base_path"]:
            raise WildmergeError(f"{m['model_id']}: its recipe has no base model, so there is no zero-shot reference")
        norm = "feature" if cal["params"].norm == "feature" else "token"
        base = reference_omegas(cal["base_path"], cal["batches"], norm=norm, device=device)
        keys = sorted(m["omega"])
        merged_flat = np.array([m["omega"][k] for k in keys]).ravel()
        base_flat = np.array([base[k] for k in keys]).ravel()
        r_refs = correlations(merged_flat, base_flat)
        sm, sb = shares(mean_omega(m["omega"])), shares(mean_omega({k: base[k] for k in keys}))
        n = len(sm)
        for name, a, b in zip(m["experts"], sm, sb):
            rows.append({"model_id": m["model_id"], "expert": name, "share_merged": float(a), "share_base": float(b),
                         "rel_merged": float(n * a), "rel_base": float(n * b), "gap": gaps.get(name, float("nan")),
                         "r_merged_base_layers": r_refs["pearson"]})
    return pd.DataFrame(rows)


CAPTIONS = {
    "importance_vs_gap": "Importance weight against the accuracy gap (Buzzega et al., Figs. 2 / 4): per merge and "
                         "expert, omega (Eq. 6) averaged over the layer groups, its share in the merge, and the "
                         "expert's fine-tuned minus base score (points, own tasks where known).",
    "omega_reference": "Omega-reference ablation (Fig. 6): the expert's omega share measured through the merged "
                       "model (CoM), through the base (zero-shot) model, and the oracle gap; "
                       "r_merged_base_layers correlates the two references over every layer group and expert.",
}


def plot_importance(per_expert, r: dict, out) -> List[Path]:
    """Scatter of the mean omega share against the gap, one point per expert (Figs. 2 / 4)."""
    from wildmerge.analysis.plotting import pyplot, save_figure, style

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for i, row in enumerate(per_expert.itertuples(index=False)):
        st = style(i)
        ax.scatter(row.gap, row.omega_rel, color=st["color"], marker=st["marker"], s=40, label=row.expert)
    ax.set_xlabel("fine-tuned minus base score (points)")
    ax.set_ylabel("importance relative to an even share (n omega_i / sum omega)")
    ax.set_title(f"CoM importance vs accuracy gap (Pearson r = {r['pearson']:.2f}, n = {r['n']})")
    ax.legend(fontsize=7)
    return list(save_figure(fig, Path(out) / "importance_vs_gap").values())


def plot_reference(ablation, out) -> List[Path]:
    """Grouped bars per expert, each reference's importance as a share over the experts (n x share averaged over
    the merges, then normalised), beside the gap's share (Fig. 6)."""
    from wildmerge.analysis.plotting import HATCHES, pyplot, save_figure

    per = ablation.groupby("expert", sort=False)[["rel_merged", "rel_base", "gap"]].mean()
    per["gap"] = per["gap"].clip(lower=0)
    bars = {label: per[col] / per[col].sum() if per[col].sum() > 0 else per[col] * np.nan
            for label, col in [("CoM (merged reference)", "rel_merged"), ("zero-shot (base reference)", "rel_base"),
                               ("oracle (gap share)", "gap")]}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(per), 4))
    x, width = np.arange(len(per)), 0.8 / len(bars)
    for i, (label, v) in enumerate(bars.items()):
        ax.bar(x + (i - 1) * width, v.to_numpy(float), width, label=label, hatch=HATCHES[i], edgecolor="black")
    ax.set_xticks(x, list(per.index), rotation=30, ha="right")
    ax.set_ylabel("share of the importance")
    ax.set_title("Omega reference ablation (CoM paper, Fig. 6)")
    ax.legend(fontsize=7)
    return list(save_figure(fig, Path(out) / "omega_reference").values())


def write_importance(run_dir, out=None, suite: Optional[str] = None, reference: bool = False,
                     device: str = "cpu") -> List[Path]:
    """Every analysis above for a run's CoM merges, into ``RUN/com_importance`` (or ``out``) with a README."""
    from transformers import AutoConfig

    from wildmerge.analysis.markdown import markdown_table
    from wildmerge.analysis.com.accounting import CAPTION, merge_accounting
    from wildmerge.analysis.report.run_data import RunData
    from wildmerge.atomic import write_json, write_text

    data = RunData.read(run_dir)
    merges = com_merges(data)
    gaps = expert_gaps(data, suite)
    out = Path(out or data.run.com_importance_dir)
    table = importance_table(merges, gaps)
    summary = gap_summary(table)
    frames = {"importance_vs_gap": table}
    if reference:
        frames["omega_reference"] = reference_ablation(merges, gaps, device)
    base = next(e for e in data.plan.entries if e.kind == "base")
    config = AutoConfig.from_pretrained(base.path)
    acc = [{"model_id": m["model_id"], **{k: v for k, v in merge_accounting(m["diag"], config).items()
                                          if not isinstance(v, dict)}} for m in merges]
    import pandas as pd

    frames["accounting"] = pd.DataFrame(acc)
    result = {"gaps": gaps, "r_per_expert": summary["r_per_expert"], "r_pooled": summary["r_pooled"]}
    if reference:
        ab = frames["omega_reference"]
        result["reference"] = {"r_merged_gap": correlations(ab["rel_merged"], ab["gap"]),
                               "r_base_gap": correlations(ab["rel_base"], ab["gap"]),
                               "r_merged_base": correlations(ab["rel_merged"], ab["rel_base"])}
    written = [write_json(out / "importance.json", result)]
    for name, df in frames.items():
        written.append(write_text(out / f"{name}.csv", df.to_csv(index=False, float_format="%.10g")))
    written += plot_importance(summary["per_expert"], summary["r_per_expert"], out)
    if reference:
        written += plot_reference(frames["omega_reference"], out)
    captions = {**CAPTIONS, "accounting": CAPTION}
    parts = [f"# Chain of Merges' importance weights\n\nRun {data.root}: {len(merges)} merge(s) with importance "
             f"weights. Per expert (n x share averaged over merges): Pearson r = {summary['r_per_expert']['pearson']:.3f}, "
             f"Spearman = {summary['r_per_expert']['spearman']:.3f} (n = {summary['r_per_expert']['n']}); pooled "
             f"over (merge, expert): Pearson r = {summary['r_pooled']['pearson']:.3f} (n = "
             f"{summary['r_pooled']['n']}).\n\n![](importance_vs_gap.png)\n"]
    for name, df in frames.items():
        rows = [[v if isinstance(v, str) else f"{v:.4g}" for v in row] for row in df.itertuples(index=False)]
        parts.append(f"## {name}\n\n{captions[name]}\n\n" + markdown_table(rows, list(df.columns)))
    if reference:
        parts.append("![](omega_reference.png)\n")
    written.append(write_text(out / "README.md", "\n".join(parts)))
    return written
