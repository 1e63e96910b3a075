"""Write a run's report: ``scores.csv``, Tables 1-3, per-task changes, sweeps, homogeneous merges, plots, the
``index.html`` leaderboard page, ``environment.json`` (the versions and family builds behind the numbers), and the
scores into each merged model's card.

``write_report(run_dir, out_dir=None, suite=None)`` writes into ``RUN/report/`` when the run has one evaluated
suite, else into ``RUN/report/<suite>/`` (keys prefixed ``<suite>/``), atomically: the folder is complete or the
previous one stays. Tables 1-3 and accuracy vs n read only the main protocol's merges (``scores.protocol_rows``):
sweep points and tuned variants have their own tables and figures, homogeneous merges are reported per domain.
"""

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Dict, List, Optional


from wildmerge.analysis.report import sweeps
from wildmerge.analysis.report import domains
from wildmerge.analysis.report import leaderboard
from wildmerge.analysis.report import merge_compute
from wildmerge.analysis.report import norms
from wildmerge.analysis.report import plots
from wildmerge.analysis.report.layerwise_plots import layerwise_figures
from wildmerge.analysis.report.choice_cost import (FIGURE_CAPTION, choice_cost, choice_cost_markdown, choice_points,
                                                  draw_choice)
from wildmerge.analysis.report.costs import cost_markdown, cost_points, merge_seconds
from wildmerge.analysis.report.environment import ENVIRONMENT, environment, lock_note, summary
from wildmerge.analysis.report.page_tables import build_page
from wildmerge.analysis.report.run_data import RunData
from wildmerge.analysis.report.scores import (TUNED, collect_scores, lower_is_better, protocol_rows,
                                             validation_columns)
from wildmerge.atomic import atomic_dir, write_text
from wildmerge.errors import WildmergeError
from wildmerge.eval.store import ResultStore
from wildmerge.locks import wait_claim
from wildmerge.run import RECIPE


class _Out:
    """Collects what one report writes into its temporary folder, under the names of the final folder."""

    def __init__(self, tmp: Path, target: Path, overridden: Optional[Dict[str, str]] = None):
        self.tmp, self.target, self.written, self.figures = tmp, target, {}, []
        self.overridden = overridden or {}  # model id -> its overridden settings, when any model has some

    def put(self, name: str, text: str) -> None:
        write_text(self.tmp / name, text)
        self.written[name.replace(".", "_")] = self.target / name

    def csv(self, name: str, frame) -> None:
        self.put(name, as_written(frame, self.overridden).to_csv(index=False, float_format="%.10g"))

    def plot(self, caption: str, saved: Optional[Dict[str, Path]]) -> None:
        if not saved:
            return
        stem = saved["png"].stem
        self.written[f"{stem}_png"], self.written[f"{stem}_svg"] = self.target / f"{stem}.png", \
            self.target / f"{stem}.svg"
        self.figures.append((caption, saved["png"], f"{stem}.svg"))


def _main_tables(out: _Out, protocol, tasks, base, best_id, best, md: List[str]) -> Dict[str, object]:
    tables = leaderboard.paper_tables(protocol)
    if base is None:
        md.append("**The base model has no score, so Tables 1-3 cannot be computed** (see notes).\n")
    else:
        vs_base = tables["vs_base"]
        out.csv("table_vs_base.csv", vs_base)
        out.put("table_vs_base.md", leaderboard.to_markdown(vs_base, "Base", base))
        md += ["## Merges vs the base (Tables 1 and 3)\n",
               "Cell `P / D`: P = % of subsets whose mean accuracy beats the base, D = mean difference to the "
               "base in percentage points, over the k evaluated subsets of each n (`n = m (k)`); n = 1: the "
               "experts alone. Only the main protocol's merges (each method at its recipe's settings, random "
               "subsets) count here.\n", leaderboard.to_markdown(vs_base, "Base", base)]
        change = tables["task_change"] = leaderboard.task_change_table(protocol, tasks)
        out.csv("table_task_change_vs_base.csv", change)
        md += ["## Per-task change vs the base (percentage points, mean over subsets)\n",
               leaderboard.change_markdown(change, tasks)]
    if best is not None:
        vs_best = tables["vs_best"]
        out.csv("table_vs_best_expert.csv", vs_best)
        out.put("table_vs_best_expert.md", leaderboard.to_markdown(vs_best, "Best FT", best))
        md += [f"## Merges vs the best single expert (Table 2): `{best_id}`, {best:.2f}\n",
               leaderboard.to_markdown(vs_best, "Best FT", best)]
    md += ["## Mean ± std over subsets\n", leaderboard.summary_markdown(protocol, tasks),
           "## Task-vector norm ||θ_merged − θ_base||₂ (mean ± std over subsets)\n",
           leaderboard.summary_markdown(protocol, [], digits=3, columns=["task_vector_norm"])]
    return tables


def _sweeps(out: _Out, df, base, title: str, md: List[str]):
    import pandas as pd

    frames, picks = [], []
    for name, rows in sweeps.sweeps(df).items():
        table = sweeps.sweep_table(rows, base)
        picked = sweeps.selection(table)
        out.csv(f"sweep_{name}.csv", table)
        md += [f"## Sweep `{name}` ({table['method'].iloc[0]}, full pool)\n", sweeps.to_markdown(table),
               sweeps.selection_markdown(picked)]
        if picked:
            picks.append({"sweep": name, "method": table["method"].iloc[0], **picked})
        if (table["status"] == "ok").any():
            out.plot(f"Sweep {name}: accuracy vs the swept value and vs task-vector norm",
                     sweeps.plot_sweep(name, table, base, out.tmp, title))
        extra = [c for c in (sweeps.VAL_MEAN, "selected") if c in table]
        frames.append(table.assign(sweep=name, setting=sweeps.settings(table))[
            ["sweep", "method", "setting", "model_id", "status", "mean", *extra, "diff_vs_base_pp",
             "task_vector_norm"]])
    if picks:
        out.csv("sweep_selection.csv", pd.DataFrame(picks))
    tuned = df[(df["kind"] == "merge") & (df["group"] == TUNED)]
    if len(tuned):
        md += ["## Tuned variants (non-default settings outside a sweep)\n", leaderboard.summary_markdown(tuned, [])]
    return pd.concat(frames, ignore_index=True) if frames else None


BALANCE_FIGURE = "Norm-balanced against norm-unbalanced subsets per method (the reality-check paper, Fig. 6)"


def _norm_figures(out: _Out, df, protocol, title: str, md: List[str]):
    """The whole-model norm per task, accuracy against the norm, and the balanced / unbalanced table, each with its
    numbers in a CSV; returns the balance table (or None)."""
    per_task = norms.norm_per_task_table(df)
    if per_task is not None:
        out.csv("norm_per_task.csv", per_task)
        out.plot("Whole-model task-vector norm per task (the reality-check paper, Fig. 5 left and Fig. 12)",
                 norms.draw_norm_per_task(per_task, out.tmp, title))
    points = norms.accuracy_vs_norm_points(protocol)
    if points is not None:
        out.csv("accuracy_vs_norm.csv", points)
        out.plot("Accuracy against task-vector norm, main protocol (Hitit et al., Figs. 3 and 4 together)",
                 norms.draw_accuracy_vs_norm(points, out.tmp, title))
    balance = norms.balance_frame(protocol)
    if balance is not None:
        out.csv("table_balance.csv", balance)
        md += [f"## {norms.BALANCE_CAPTION}\n",
               "Per method and n, the merges whose experts' max/min whole-model task-vector norm is at most the "
               "median of that size (balanced) against the rest (unbalanced).\n", norms.balance_markdown(balance)]
        out.plot(BALANCE_FIGURE, norms.draw_balance(balance, out.tmp, title))
    return balance


def _homogeneous(out: _Out, df, base, title: str, md: List[str]):
    if domains.domain_merges(df).empty:
        return None
    table = domains.domain_table(df, base)
    out.csv("table_homogeneous.csv", table)
    md += ["## Homogeneous vs heterogeneous merging (Appendix E)\n", domains.to_markdown(table, base)]
    if table["mean"].notna().any():
        out.plot("Homogeneous vs heterogeneous merging (Figs. 27-28)", domains.plot_domains(table, base, out.tmp,
                                                                                           title))
    return table


def _choice_cost(out: _Out, data: RunData, df, store: ResultStore, title: str, md: List[str]):
    """The cost of choosing hyperparameters per method (grid against TAS), where the run has either."""
    from wildmerge.analysis.tas.sweep import recorded_cost

    tas = recorded_cost(data.run.tune_dir)
    evals = {m: float(store.load(j)["seconds"]) for m, j in zip(df["model_id"], df["job_id"])
             if j and store.load(j).get("seconds") is not None}
    table = choice_cost(data.plan.entries, merge_seconds(data.plan.entries), evals, tas)
    if table.empty:
        return None
    out.csv("choice_cost.csv", table)
    md.append(choice_cost_markdown(table, tas, bool(validation_columns(df))))
    points = choice_points(df, table, data.manifest.tuned if data.manifest else {})
    if points is not None:
        out.csv("choice_cost_vs_accuracy.csv", points)
        out.plot(FIGURE_CAPTION, draw_choice(points, out.tmp, title))
    return table


def _merge_compute(out: _Out, data: RunData, title: str, md: List[str]) -> None:
    """FLOPs, memory and seconds of the data-based merges (counted and measured), where the run has any."""
    rows = merge_compute.compute_rows(data)
    if rows is None:
        return
    out.csv("merge_compute.csv", rows)
    md.append(merge_compute.compute_markdown(rows))
    out.plot(merge_compute.CAPTION, merge_compute.draw_compute(rows, out.tmp, title))


def _update_cards(data: RunData, df, tasks: List[str], suite: str, notes: List[str]) -> int:
    """Rewrite each merged model's README.md with its scores (HF model-index); returns how many."""
    from wildmerge.merging.model_card import write_card

    manifest = data.manifest
    if manifest is None:
        notes.append("no manifest.json: model cards were not updated with scores")
        return 0
    done = 0
    for _, r in df[(df["kind"] == "merge") & (df["status"] == "ok")].iterrows():
        entry = data.entries[r["model_id"]]
        folder = Path(entry.path)
        if not (folder / RECIPE).is_file():
            continue
        scores = {t: r[t] / 100.0 for t in tasks}
        write_card(folder, entry, manifest.models, (folder / RECIPE).read_text(), scores=scores, suite=suite,
                   run=data.run.name)
        done += 1
    return done


@contextlib.contextmanager
def _report_dir(data: RunData, target: Path):
    """``atomic_dir(target)`` under the run's report claim: two reports do not race, and the temporary folder of a
    report that was killed is removed (nobody else can be writing it)."""
    with wait_claim(data.run.report_claim):
        for p in target.parent.glob(f".{target.name}.*"):
            if ".tmp-" in p.name or ".old-" in p.name:
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        with atomic_dir(target) as tmp:
            yield tmp


def _override_note(overridden: Dict[str, str]) -> str:
    """One line for the top of the report when some scores were made with settings other than the suite file's
    (``wildmerge eval --limit 2``...): such numbers must never pass for the suite's own."""
    used = {o for o in overridden.values() if o}
    if not used:
        return ""
    counts = {o: sum(v == o for v in overridden.values()) for o in sorted(set(overridden.values()))}
    parts = [f"{o or 'none'} ({c} model{'s' if c > 1 else ''})" for o, c in counts.items()]
    what = next(iter(used)) if len(counts) == 1 else "; ".join(parts)
    return (f"Evaluation settings overridden: {what.replace(';', ', ')}: these are not the suite file's settings; "
            f"`wildmerge eval RUN --suite NAME` without overrides scores the suite as written")


def missing_references(df) -> list:
    """A warning for the top of the page when the base or an expert has no score: the tables that need them are
    missing or computed from fewer experts, and the reader must know before reading them."""
    lines = []
    for kind, consequence in (("base", "Tables 1 and 3 (merges vs the base) cannot be computed"),
                              ("expert", "the best expert (Table 2) and the n = 1 rows use only the others")):
        lacking = df[(df["kind"] == kind) & (df["status"] != "ok")]
        if len(lacking):
            names = ", ".join(f"`{m}` ({s})" for m, s in zip(lacking["model_id"], lacking["status"]))
            lines.append(f"> **Incomplete: {kind} without a score: {names}**; {consequence}. Rerun the evaluation "
                         f"(`--retry-failed` reruns failed jobs); the notes below say why.\n")
    return lines


def scored(data: RunData, suite: str):
    """(scores, tasks, notes, overridden) of one evaluated suite, as every part of its report reads them: the scores
    with each merge's norm and the normalized accuracy; ``overridden``: each model's overridden evaluation settings
    when some scores were made with any (their note heads ``notes``), else None. The Python API reads the same."""
    df, tasks, notes = collect_scores(data, suite)
    norms.add_norms(data, df, notes)
    leaderboard.add_normalized(df, leaderboard.expert_tasks(data.run),  # experts' declared tasks (pool ``tasks:``)
                               lower_is_better(data, suite))
    overridden = {m: o for m, o in zip(df["model_id"], df["overridden"])}
    override_note = _override_note(overridden)
    if override_note:
        notes.insert(0, override_note)
    return df, tasks, notes, overridden if override_note else None


def as_written(frame, overridden: Optional[Dict[str, str]]):
    """``frame`` as the report's CSV holds it: with overridden settings, each row says which (per model where it has
    one), so such numbers never pass for the suite's own."""
    if not overridden:
        return frame
    everyone = ", ".join(sorted(set(overridden.values())))
    return frame.assign(overridden=frame["model_id"].map(overridden) if "model_id" in frame else everyone)


def _write_one(data: RunData, suite: str, target: Path) -> Dict[str, Path]:
    name = data.run.name
    df, tasks, notes, overridden = scored(data, suite)
    protocol = protocol_rows(df)
    base, best_id, best = leaderboard.references(protocol)
    title = f"{name} / {suite}"
    override_note = _override_note(overridden) if overridden else ""
    env = environment(data)
    if lock_note(env):
        notes.append(lock_note(env))
    with _report_dir(data, target) as tmp:
        out = _Out(tmp, target, overridden)
        out.csv("scores.csv", leaderboard.scores_table(df, tasks))
        out.csv("norms.csv", df[["model_id", "kind", "variant", "n", "subset_id", "task_vector_norm"]])
        md = [f"# Leaderboard: run `{name}`, suite `{suite}`\n"] + ([f"> **{override_note}**\n"] if override_note else [])
        md += [f"Scores are accuracies in percent; a model's score is the mean over {len(tasks)} task(s): "
               f"{', '.join(tasks)}.\n", f"{summary(env)}\n"]
        out.put(ENVIRONMENT, json.dumps(env, indent=2) + "\n")
        validation = validation_columns(df)
        if validation:
            md += [f"Validation splits, scored apart and never averaged into the means: {', '.join(validation)}; "
                   f"sweep points are chosen on their mean (`val_mean`) and reported on the test split.\n"]
        md += missing_references(df)
        tables = _main_tables(out, protocol, tasks, base, best_id, best, md)
        if protocol["normalized"].notna().any():
            md += ["## Normalized accuracy (the reality-check paper's normalized performance, Tables 1 and 4)\n",
                   "Per expert of a model, the mean over its own tasks (pool `tasks:`) of the model's score over "
                   "the expert's (inverted for a lower-is-better metric), averaged over the model's experts; an "
                   "expert alone scores 1.\n",
                   leaderboard.summary_markdown(protocol[protocol["kind"] != "base"], [], digits=3,
                                                columns=["normalized"])]
        if ((protocol["kind"] == "merge") & (protocol["status"] == "ok")).any():  # no curve, no figure
            out.plot("Mean accuracy vs n (Fig. 3/6)", plots.accuracy_vs_n(protocol, tmp, title))
            out.plot("Accuracy vs n per task (Figs. 7-10)", plots.per_task_vs_n(protocol, tasks, tmp, title))
            out.plot("Task-vector norm vs n (Fig. 4)", plots.norm_vs_n(protocol, tmp, title))
            out.plot("Merge and evaluation seconds per model against accuracy", plots.cost_vs_performance(
                cost_points(ResultStore(data.run.eval_dir(suite)), protocol, merge_seconds(data.plan.entries)), tmp,
                title))
        tables["balance"] = _norm_figures(out, df, protocol, title, md)
        tables["sweeps"] = _sweeps(out, df, base, title, md)
        tables["homogeneous"] = _homogeneous(out, df, base, title, md)
        tables["choice_cost"] = _choice_cost(out, data, df, ResultStore(data.run.eval_dir(suite)), title, md)
        _merge_compute(out, data, title, md)
        model_dirs = {e.model_id: Path(e.path) for e in data.plan.entries if e.kind == "merge"}
        for variant, saved in layerwise_figures(df, model_dirs, tmp).items():
            out.plot(f"{variant}: covariate shift and importance weights per layer", saved)
        md.append(leaderboard.screening_markdown(df))
        md.append(cost_markdown(ResultStore(data.run.eval_dir(suite)), df))
        if notes:
            md += ["## Notes\n", "".join(f"- {n}\n" for n in notes)]
        md.append("\n![accuracy vs n](accuracy_vs_n.png)\n" if "accuracy_vs_n_png" in out.written else "")
        out.put("leaderboard.md", "\n".join(md))
        links = {mid: Path(os.path.relpath(path, target)).as_posix() for mid, path in model_dirs.items()}
        page_notes = notes + [summary(env)]  # the page says what its numbers were made with, among its notes
        out.put("index.html", build_page(name, suite, df, tasks, tables, out.figures, links, page_notes))
    if override_note:  # a model card states the suite's own numbers, never those of a limited evaluation
        print("note: model cards were not updated: the scores were made with overridden settings")
        cards = 0
    else:
        cards = _update_cards(data, df, tasks, suite, notes)
    for note in notes:
        print(f"note: {note}")
    if cards:
        print(f"{cards} model card(s) updated with their {suite} scores")
    return out.written


def write_report(run_dir, out_dir=None, suite: Optional[str] = None) -> Dict[str, Path]:
    """Write the report of ``suite`` (or of each evaluated suite); returns name -> path of what was written."""
    data = RunData.read(run_dir)  # the plan, manifest and indexes, read once for every part of every suite
    evaluated = data.suites
    if not evaluated:
        raise WildmergeError(f"{data.root} has no evaluation results; run `wildmerge eval {data.root} --suite NAME`")
    root = Path(out_dir).resolve() if out_dir else data.run.report_dir()
    if len(evaluated) == 1 and suite in (None, evaluated[0]):
        return _write_one(data, evaluated[0], root)
    written = {}
    for s in [suite] if suite else evaluated:
        written.update({f"{s}/{k}": v for k, v in _write_one(data, s, root / s).items()})
    return written
