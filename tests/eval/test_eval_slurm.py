"""The Slurm executor's submitit path (job array, results, dedupe), run on submitit's local cluster: no sbatch here."""

import pytest

from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.eval.evaluate import evaluate_models
from wildmerge.eval.options import EvalOptions

pytest.importorskip("submitit")


def test_slurm_executor_runs_job_array_through_submitit(lm_family, tmp_path):  # noqa: F811
    models = [lm_family["base"], lm_family["experts"][0], lm_family["copy"]]
    summary = evaluate_models(models, lm_family["suite"], tmp_path / "out", EvalOptions(
        executor="slurm", slurm_cluster="local", slurm_time=10, cpus_per_job=1, limit=3))
    assert summary["jobs"] == 2 and summary["ran"] == 2 and summary["ok"] == 2 and not summary["failed"]
    assert summary["index"][lm_family["copy"]] == summary["index"][lm_family["experts"][0]]
    folder = tmp_path / "out" / "mini" / "slurm"  # submitit's job folder: one submission and log per array task
    assert len(list(folder.glob("*_submitted.pkl"))) == 2 and len(list(folder.glob("*_log.out"))) == 2
    again = evaluate_models(models, lm_family["suite"], tmp_path / "out",
                            EvalOptions(executor="slurm", slurm_cluster="local", limit=3))
    assert again["ran"] == 0
