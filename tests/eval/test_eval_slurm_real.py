"""Evaluation job arrays through a real Slurm (sbatch, squeue, scancel on a one-node cluster: .ci/slurm_up.sh).

One array task is cancelled while it runs: that model fails with a message, the rerun (``--retry-failed``) runs
only it, and every score equals the one-process (serial) run's. Skipped when Slurm is not installed or its
controller does not answer. (Merging has no Slurm path: merges split across processes by claims, not by arrays.)
"""

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.eval.evaluate import evaluate_models
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.store import ResultStore

pytest.importorskip("submitit")
UP = Path(__file__).resolve().parents[2] / ".ci" / "slurm_up.sh"


@pytest.fixture(scope="module")
def slurm():
    if shutil.which("sbatch") is None:
        pytest.skip("Slurm is not installed (no sbatch on PATH); .ci/slurm_up.sh installs and starts one")
    conf = os.environ.get("SLURM_CONF") or "/tmp/wildmerge-slurm/slurm.conf"
    if os.geteuid() == 0:  # start (or find) the one-node cluster
        up = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=180)
        conf = next((line.split("=", 1)[1] for line in up.stdout.splitlines() if line.startswith("SLURM_CONF=")),
                    conf)
    env = {**os.environ, "SLURM_CONF": conf}
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env, timeout=30)
    if "UP" not in ping.stdout:
        pytest.skip(f"the Slurm controller does not answer (scontrol ping: {ping.stdout.strip() or ping.stderr.strip()})")
    return conf


def scores(summary):
    store = ResultStore(summary["store"])
    return {m: store.load(j)["scores"] for m, j in summary["index"].items()}


def cancel_one_running(name: str, timeout: float = 300) -> str:
    """scancel the first array task of job ``name`` seen running; returns its id."""
    end = time.time() + timeout
    while time.time() < end:
        out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i %T"], capture_output=True, text=True).stdout
        running = [line.split()[0] for line in out.splitlines() if line.endswith("RUNNING")]
        if running:
            subprocess.run(["scancel", running[0]], check=True)
            return running[0]
        time.sleep(0.5)
    raise AssertionError("no array task of the evaluation ran within the timeout")


def test_real_slurm_array_survives_a_cancelled_task(slurm, lm_family, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SLURM_CONF", slurm)
    models = [lm_family["base"], *lm_family["experts"]]
    reference = evaluate_models(models, lm_family["suite"], tmp_path / "serial",
                                EvalOptions(executor="serial", limit=3))
    assert reference["ok"] == 3

    slurm_opts = dict(executor="slurm", slurm_time=10, cpus_per_job=1, gpus_per_job=0, limit=3)
    out = {}
    run = threading.Thread(target=lambda: out.update(
        evaluate_models(models, lm_family["suite"], tmp_path / "slurm", EvalOptions(**slurm_opts))))
    run.start()
    killed = cancel_one_running("wildmerge-eval")
    run.join(timeout=900)
    assert not run.is_alive(), "the executor did not notice the cancelled task"
    assert out["ran"] == 3 and len(out["failed"]) == 1, (killed, out["failed"])
    why = next(iter(out["failed"].values()))  # which one depends on when scancel's SIGTERM reaches the task
    assert "left the queue without a result" in why or "killed by SIGTERM" in why, why
    folder = tmp_path / "slurm" / "mini" / "slurm"
    assert len(list(folder.glob("*_submitted.pkl"))) == 3  # one real array of three tasks

    again = evaluate_models(models, lm_family["suite"], tmp_path / "slurm",
                            EvalOptions(retry_failed=True, **slurm_opts))
    assert again["ran"] == 1 and again["ok"] == 3 and not again["failed"]
    assert scores(again) == scores(reference)
