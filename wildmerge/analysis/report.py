"""Write a run's leaderboard: ``scores.csv``, Table 1/3 and Table 2 (CSV + Markdown), norms, plots.

``write_report(run_dir, out_dir=None, suite=None)`` writes into ``RUN/report/`` when the run has one evaluated
suite, else into ``RUN/report/<suite>/`` (keys prefixed ``<suite>/``), atomically: the folder is complete or the previous one stays.
"""

from pathlib import Path
from typing import Dict, Optional

from tqdm.auto import tqdm

from wildmerge.analysis import leaderboard, plots
from wildmerge.analysis.norms import NormCache
from wildmerge.analysis.scores import collect_scores
from wildmerge.atomic import atomic_dir, write_text
from wildmerge.errors import WildmergeError
from wildmerge.run import RunFolder


def _norms(run_dir: Path, df, notes) -> None:
    """Task-vector norm of every merge and expert against the base (streaming; cached in RUN/eval/norms.json)."""
    entries = {e.model_id: e for e in RunFolder(run_dir).read_plan().entries}
    base = next(e.path for e in entries.values() if e.kind == "base")
    cache = NormCache(run_dir / "eval" / "norms.json")
    values = []
    for model_id, kind in tqdm(list(zip(df["model_id"], df["kind"])), desc="task-vector norms", unit="model"):
        value = float("nan")
        if kind not in ("base", "composition"):  # a composition keeps its experts: it has no weights of its own
            try:
                value = cache.norm(entries[model_id].path, base)
            except (WildmergeError, OSError) as exc:
                notes.append(f"{model_id}: no task-vector norm ({exc})")
        values.append(value)
    cache.save()
    df["task_vector_norm"] = values


def _write_one(run_dir: Path, suite: str, target: Path) -> Dict[str, Path]:
    df, tasks, notes = collect_scores(run_dir, suite)
    _norms(run_dir, df, notes)
    base, best_id, best = leaderboard.references(df)
    written: Dict[str, Path] = {}
    with atomic_dir(target) as tmp:
        def put(name: str, text: str) -> None:
            write_text(tmp / name, text)
            written[name.replace(".", "_")] = target / name

        put("scores.csv", leaderboard.scores_table(df, tasks).to_csv(index=False, float_format="%.10g"))
        put("norms.csv", df[["model_id", "kind", "variant", "n", "subset_id", "task_vector_norm"]]
            .to_csv(index=False, float_format="%.10g"))
        md = [f"# Leaderboard: run `{run_dir.name}`, suite `{suite}`\n",
              f"Scores are accuracies in percent; a model's score is the mean over {len(tasks)} task(s): "
              f"{', '.join(tasks)}.\n"]
        if base is None:
            md.append("**The base model has no score, so Tables 1-3 cannot be computed** (see notes).\n")
        else:
            vs_base = leaderboard.interference_table(df, base, "base")
            put("table_vs_base.csv", vs_base.to_csv(index=False, float_format="%.10g"))
            put("table_vs_base.md", leaderboard.to_markdown(vs_base, "Base", base))
            md += ["## Merges vs the base (Tables 1 and 3)\n",
                   "Cell `P / D`: P = % of subsets whose mean accuracy beats the base, D = mean difference to the "
                   "base in percentage points, over the k evaluated subsets of each n (`n = m (k)`); n = 1: the "
                   "experts alone.\n", leaderboard.to_markdown(vs_base, "Base", base)]
        if best is not None:
            vs_best = leaderboard.interference_table(df, best, f"best expert {best_id}")
            put("table_vs_best_expert.csv", vs_best.to_csv(index=False, float_format="%.10g"))
            put("table_vs_best_expert.md", leaderboard.to_markdown(vs_best, "Best FT", best))
            md += [f"## Merges vs the best single expert (Table 2): `{best_id}`, {best:.2f}\n",
                   leaderboard.to_markdown(vs_best, "Best FT", best)]
        md += ["## Mean ± std over subsets\n", leaderboard.summary_markdown(df, tasks),
               "## Task-vector norm ||θ_merged − θ_base||₂ (mean ± std over subsets)\n",
               leaderboard.summary_markdown(df, [], digits=3, columns=["task_vector_norm"])]
        if notes:
            md += ["## Notes\n", "".join(f"- {n}\n" for n in notes)]
        title = f"{run_dir.name} / {suite}"
        for name, fn in (("accuracy_vs_n", lambda: plots.accuracy_vs_n(df, tmp, title)),
                         ("accuracy_vs_n_per_task", lambda: plots.per_task_vs_n(df, tasks, tmp, title)),
                         ("norm_vs_n", lambda: plots.norm_vs_n(df, tmp, title))):
            if (df["kind"] == "merge").any() and fn():
                written[f"{name}_png"], written[f"{name}_svg"] = target / f"{name}.png", target / f"{name}.svg"
        md.append("\n![accuracy vs n](accuracy_vs_n.png)\n" if "accuracy_vs_n_png" in written else "")
        put("leaderboard.md", "\n".join(md))
    for note in notes:
        print(f"note: {note}")
    return written


def write_report(run_dir, out_dir=None, suite: Optional[str] = None) -> Dict[str, Path]:
    """Write the report of ``suite`` (or of each evaluated suite); returns name -> path of what was written."""
    run_dir = Path(run_dir).resolve()
    evaluated = RunFolder(run_dir).evaluated_suites()
    if not evaluated:
        raise WildmergeError(f"{run_dir} has no evaluation results; run `wildmerge eval {run_dir} --suite NAME`")
    root = Path(out_dir).resolve() if out_dir else run_dir / "report"
    if len(evaluated) == 1 and suite in (None, evaluated[0]):
        return _write_one(run_dir, evaluated[0], root)
    written = {}
    for s in [suite] if suite else evaluated:
        written.update({f"{s}/{k}": v for k, v in _write_one(run_dir, s, root / s).items()})
    return written
