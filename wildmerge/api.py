"""wildmerge from Python: the jobs of ``wildmerge sample`` and ``wildmerge search`` and a run's tables as pandas
DataFrames, for a notebook that would otherwise shell out to the command line and parse its CSVs.

Each function goes through the command line's own code: ``sample`` builds the command's ``SampleSettings`` and calls
``protocol.run_sample``; ``guided_search`` calls ``search.guided``; a ``Run`` reads the run folder through
``run.py`` and the report's readers, so its tables are the report's CSVs. Bad input is the command line's
``ConfigError`` with its one-line message (docs/api.md).
"""

from pathlib import Path
from typing import Dict, Optional, Sequence, Union

from wildmerge.errors import ConfigError

__all__ = ["sample", "guided_search", "open_run", "Run"]


def sample(pool: str = "demo", **options) -> Optional["Run"]:
    """``wildmerge sample --base POOL ...``: draw, merge, evaluate and report; returns the opened run (a rerun resumes).

    ``options`` are ``protocol.SampleSettings``' fields (the flags' names with ``_``; ``ablations`` for ``--sweep``,
    ``full=False`` for ``--no-full``, ``download=False`` for ``--no-download``) and the evaluation options by name
    (``limit``, ``workers``, ``executor``, ...; ``eval_device`` for ``--eval-device``). With ``dry_run=True`` the
    plan and its cost are printed and nothing is returned."""
    from wildmerge.eval.options import EvalOptions
    from wildmerge.protocol import SampleSettings, run_sample

    if "evaluation" in options:
        raise ConfigError("give the evaluation options by name (limit=2, workers=1, ...), not as evaluation=")
    names = {("eval_device" if n == "device" else n): n for n in EvalOptions.model_fields if n != "allow_pickle"}
    evaluation = {names[k]: options.pop(k) for k in list(options) if k in names}
    if "allow_pickle" in options:  # the command line's --allow-pickle reaches both, as here
        evaluation["allow_pickle"] = options["allow_pickle"]
    settings = SampleSettings(pool=pool, evaluation=EvalOptions(**evaluation), **options)
    outcome = run_sample(settings)
    return None if settings.dry_run else Run(outcome.run_dir)


def guided_search(pool: str, budget: float, *, out=None, suite: str = "demo", limit: Optional[int] = None,
                  methods: Union[str, Sequence[str], None] = None, first_fraction: float = 0.125, eta: float = 2.0,
                  seed: int = 0, rule: str = "thompson", experts: bool = True, tune: bool = True,
                  tune_samples: int = 32, exclude: Union[str, Sequence[str]] = (), merge_device: str = "cpu",
                  dry_run: bool = False) -> Optional[dict]:
    """``wildmerge search --base POOL --budget B ...`` (the same defaults; ``experts=False`` for ``--no-experts``,
    ``tune=False`` for ``--no-tune``): the result ``search.json`` records (winner, its score, its interval to the
    base, its model folder); a rerun resumes. With ``dry_run=True`` the cost is printed and nothing is returned."""
    from wildmerge.search.guided import dry_run as print_cost, search_pool

    methods, exclude = None if methods is None else _names(methods), _names(exclude)  # None: the pool's arms
    settings = dict(suite_name=suite, methods=methods, first=first_fraction, limit=limit, eta=eta, exclude=exclude,
                    rule=rule, experts=experts)
    if dry_run:
        print_cost(pool, budget, **settings)
        return None
    return search_pool(pool, budget, out=out, seed=seed, tune=tune, tune_samples=tune_samples,
                       merge_device=merge_device, **settings)


def _names(value) -> list:
    """``"ta,ties"`` or ``["ta", "ties"]``, as the flag's comma-separated list."""
    return [n for n in value.split(",") if n] if isinstance(value, str) else list(value)


def open_run(path) -> "Run":
    """The run folder at ``path`` (written by ``sample``); a folder that is not a run is the report's error."""
    return Run(path)


class Run:
    """An opened run folder. Its tables are read on each call (a run that is still evaluating changes), by the code
    that writes the report, so each equals the CSV ``wildmerge report`` writes; ``suite`` picks an evaluated suite
    where the run has several."""

    def __init__(self, path):
        self.path = self._data(path).root  # not a run folder: the report's own message, now

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    @staticmethod
    def _data(path):
        from wildmerge.analysis.report.run_data import RunData

        return RunData.read(path)

    def _scored(self, suite: Optional[str]):
        from wildmerge.analysis.report.write import scored

        data = self._data(self.path)
        df, tasks, _, overridden = scored(data, data.pick_suite(suite))
        return df, tasks, overridden

    def scores(self, suite: Optional[str] = None):
        """Every model's scores in percent, one row each (``report/scores.csv``)."""
        from wildmerge.analysis.report.leaderboard import scores_table
        from wildmerge.analysis.report.write import as_written

        df, tasks, overridden = self._scored(suite)
        return as_written(scores_table(df, tasks), overridden)

    def leaderboard(self, suite: Optional[str] = None):
        """The scored models, best mean first (the rows of ``scores()`` whose status is ok)."""
        scores = self.scores(suite)
        return scores[scores["status"] == "ok"].sort_values("mean", ascending=False, kind="stable").reset_index(
            drop=True)

    def table1(self, suite: Optional[str] = None):
        """Tables 1 and 3 of the in-the-wild study, merges against the base (``report/table_vs_base.csv``)."""
        return self._paper_table("vs_base", "the base model has no score, so Tables 1 and 3 cannot be computed", suite)

    def table2(self, suite: Optional[str] = None):
        """Table 2, merges against the best expert alone (``report/table_vs_best_expert.csv``)."""
        return self._paper_table("vs_best", "no expert has a score, so Table 2 cannot be computed", suite)

    def _paper_table(self, key: str, missing: str, suite: Optional[str]):
        from wildmerge.analysis.report.leaderboard import paper_tables
        from wildmerge.analysis.report.scores import protocol_rows
        from wildmerge.analysis.report.write import as_written
        from wildmerge.errors import WildmergeError

        df, _, overridden = self._scored(suite)
        tables = paper_tables(protocol_rows(df))
        if key not in tables:
            raise WildmergeError(f"{self.path}: {missing}; the status and error columns of scores() say why")
        return as_written(tables[key], overridden)

    def records(self, suite: Optional[str] = None):
        """One row per model of the plan: its entry (``plan.json``), its merge record (``merge_info.json``:
        ``merge_seconds``, ``merge_device``, ``merge_finished``, ``weights_pruned``) and, when the run was evaluated,
        its evaluation record on the suite (``job_id``, ``eval_status``, ``eval_seconds``, ``eval_error``)."""
        import json

        import pandas as pd

        from wildmerge.eval.store import ResultStore
        from wildmerge.run import read_merge_info

        data = self._data(self.path)
        suite = data.pick_suite(suite) if suite or data.indexes else None
        jobs = data.indexes[suite].models if suite else {}
        store = ResultStore(data.run.eval_dir(suite)) if suite else None
        rows = []
        for e in data.plan.entries:
            row = {"model_id": e.model_id, "kind": e.kind, "method": e.method or "", "n": e.n,
                   "subset_id": e.subset_id, "experts": ";".join(e.experts),
                   "hparams": json.dumps(e.hparams, sort_keys=True), "path": e.path}
            info = read_merge_info(e.path) if e.kind == "merge" else None
            row.update(merge_seconds=info.seconds if info else None, merge_device=info.device if info else None,
                       merge_finished=info.finished if info else None, weights_pruned=info.weights_pruned if info
                       else None)
            if suite:
                job = jobs.get(e.model_id, "")
                record = store.load(job) if job else {"status": "not evaluated"}
                row.update(suite=suite, job_id=job, eval_status=record["status"],
                           eval_seconds=record.get("seconds"),
                           eval_error=(record.get("error") or "").split("\n")[0])
            rows.append(row)
        return pd.DataFrame(rows)

    def report(self, out=None, suite: Optional[str] = None) -> Dict[str, Path]:
        """(Re)write the report (``wildmerge report RUN [--out OUT] [--suite S]``); name -> path of each file."""
        from wildmerge.analysis.report.write import write_report

        return write_report(self.path, out_dir=out, suite=suite)
