"""Tables 1-3 across several runs (one per base model) with the paper's "Average" rows, Figs. 3 / 4 / 6 with
one column per base (``combine_plots.py``), and the hyperparameters each run chose (``choices.py``: runs over
seeds show whether a choice is stable).

Hitit et al. (arXiv 2511.21437, Tables 1-3) list each base's ``P / D`` cells and then an Average row per method: the
unweighted mean over the bases of the reference accuracy, of P and of D (e.g. TA, n = 1: (17 + 25 + 25 + 33) / 4 =
25). A cell some base lacks is averaged over the bases that have it, and the Average cell says over how many.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional

from wildmerge.analysis.report import leaderboard
from wildmerge.analysis.markdown import markdown_table
from wildmerge.analysis.report.choices import choice_tables, choices_markdown
from wildmerge.analysis.report.combine_plots import curve_table, draw_combined
from wildmerge.analysis.report.environment import ENVIRONMENT, combined_environment, lock_note, summary
from wildmerge.analysis.report.norms import add_norms
from wildmerge.analysis.report.run_data import RunData
from wildmerge.analysis.report.scores import collect_scores, protocol_rows
from wildmerge.atomic import atomic_dir, write_text
from wildmerge.errors import WildmergeError

AVERAGE = "Average"


def _label(data: RunData, taken) -> str:
    label = data.plan.pool or data.run.name
    return f"{label} ({data.run.name})" if label in taken else label


def _protocols(runs: List, suite: Optional[str] = None, choices: Optional[list] = None) -> Dict[str, object]:
    """{base label (the pool's name): the run's main-protocol rows}; ``choices`` gets each run's chosen
    hyperparameters (``choices.run_choices``) appended."""
    from wildmerge.analysis.report.choices import run_choices

    out = {}
    for data in map(RunData.of, runs):
        df, _, _ = collect_scores(data, suite)
        label = _label(data, out)
        out[label] = protocol_rows(df).copy()
        if choices is not None:
            choices.append(run_choices(data, df, label))
    return out


def combined_tables(runs: List, suite: Optional[str] = None, protocols=None) -> Dict[str, object]:
    """{"vs_base": long table, "vs_best": long table}, each with a ``base_model`` column and Average rows.
    ``runs``: run folders or their ``RunData``; ``protocols``: their ``_protocols``, when read already."""
    import pandas as pd

    frames: Dict[str, list] = {"vs_base": [], "vs_best": []}
    for (label, protocol), data in zip((protocols or _protocols(runs, suite)).items(), map(RunData.of, runs)):
        base, best_id, best = leaderboard.references(protocol)
        if base is None:
            raise WildmergeError(f"{data.root}: the base model has no score, so its Table 1 row cannot be averaged; "
                                 f"evaluate it (`wildmerge eval {data.root}`) or leave the run out")
        frames["vs_base"].append(leaderboard.interference_table(protocol, base, "base", paired="vs_base_diff")
                                 .assign(base_model=label))
        if best is not None:
            frames["vs_best"].append(leaderboard.interference_table(protocol, best, f"best expert {best_id}",
                                                                    paired="vs_best_diff").assign(base_model=label))
    out = {}
    for key, parts in frames.items():
        if not parts:
            continue
        long = pd.concat(parts, ignore_index=True)
        avg = (long.groupby(["method", "n"], sort=False)
               .agg(k=("k", "sum"), pct_beat=("pct_beat", "mean"), mean_diff_pp=("mean_diff_pp", "mean"),
                    bases=("base_model", "nunique")).reset_index())
        ref = long.groupby("base_model", sort=False)["reference_acc"].first().mean()
        avg = avg.assign(base_model=AVERAGE, reference="mean over bases", reference_acc=ref)
        long["bases"] = 1
        out[key] = pd.concat([long, avg], ignore_index=True)[
            ["base_model", "method", "n", "k", "bases", "reference", "reference_acc", "pct_beat", "mean_diff_pp"]]
    return out


def combined_markdown(table, reference_label: str) -> str:
    """| Base model | Method | Base | n = 1 | ... | with P / D cells; Average rows last."""
    ns = sorted(table["n"].unique())
    nbases = table[table["base_model"] != AVERAGE]["base_model"].nunique()
    rows = []
    for base_model in dict.fromkeys(table["base_model"]):
        block = table[table["base_model"] == base_model]
        for i, method in enumerate(dict.fromkeys(block["method"])):
            own = block[block["method"] == method]
            cells = [base_model if i == 0 else "", method, f"{own['reference_acc'].iloc[0]:.1f}"]
            for n in ns:
                hit = own[own["n"] == n]
                if hit.empty:
                    cells.append("")
                    continue
                r = hit.iloc[0]
                partial = base_model == AVERAGE and int(r["bases"]) != nbases
                cells.append(f"{r['pct_beat']:.0f} / {r['mean_diff_pp']:+.2f}"
                             + (f" ({int(r['bases'])} of {nbases} bases)" if partial else ""))
            rows.append(cells)
    return markdown_table(rows, ["Base model", "Method", reference_label] + [f"n = {n}" for n in ns])


def write_combined(run_dirs, out_dir, suite: Optional[str] = None) -> Dict[str, Path]:
    if len(run_dirs) < 2:
        raise WildmergeError("--combine needs at least two run folders (one per base model)")
    runs = [RunData.read(r) for r in run_dirs]  # a clear error for a folder that is not a run, before any result
    chosen: list = []
    protocols = _protocols(runs, suite, chosen)
    tables = combined_tables(runs, suite, protocols)  # a base without a score is refused before any norm is read
    notes: List[str] = []
    for data, protocol in zip(runs, protocols.values()):  # from each run's norm cache (its report filled it)
        add_norms(data, protocol, notes)
    env = combined_environment(runs)
    notes += [lock_note(env)] if lock_note(env) else []
    for note in notes:
        print(f"note: {note}")
    target = Path(out_dir).resolve()
    written = {}
    with atomic_dir(target) as tmp:
        md = [f"# Tables 1-3 and Figs. 3 / 4 / 6 across {len(runs)} runs\n",
              "Cells `P / D` per base model as in each run's report; Average = unweighted mean over the bases of "
              "the reference accuracy, P and D.\n", f"{summary(env)}\n"]
        write_text(tmp / ENVIRONMENT, json.dumps(env, indent=2) + "\n")
        written["environment_json"] = target / ENVIRONMENT
        for key, title, ref in (("vs_base", "Merges vs the base (Tables 1 and 3)", "Base"),
                                ("vs_best", "Merges vs the best single expert (Table 2)", "Best FT")):
            if key not in tables:
                continue
            write_text(tmp / f"combined_{key}.csv", tables[key].to_csv(index=False, float_format="%.10g"))
            written[f"combined_{key}_csv"] = target / f"combined_{key}.csv"
            md += [f"## {title}\n", combined_markdown(tables[key], ref)]
        write_text(tmp / "combined_curves.csv", curve_table(protocols).to_csv(index=False, float_format="%.10g"))
        written["combined_curves_csv"] = target / "combined_curves.csv"
        for ext, path in draw_combined(protocols, tmp).items():
            written[f"combined_vs_n_{ext}"] = target / path.name
        md += ["## Accuracy and task-vector norm against n, every base (Figs. 3 / 6 and 4)\n",
               "![accuracy and norm vs n](combined_vs_n.png)\n\nThe points drawn: `combined_curves.csv`.\n"]
        table, counts = choice_tables(chosen)
        if table is not None:  # the hyperparameters each run chose, and how often each setting was chosen
            for name, frame in (("chosen_hyperparameters", table), ("chosen_counts", counts)):
                write_text(tmp / f"{name}.csv", frame.to_csv(index=False, float_format="%.10g"))
                written[f"{name}_csv"] = target / f"{name}.csv"
            md.append(choices_markdown(table, counts))
        write_text(tmp / "combined.md", "\n".join(md))
        written["combined_md"] = target / "combined.md"
    return written
