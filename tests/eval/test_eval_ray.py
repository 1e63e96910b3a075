"""The Ray executor on a local single-node cluster bound to 127.0.0.1: every job runs, results land in the store."""

import os

import pytest

from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.eval.evaluate import evaluate_models
from wildmerge.eval.options import EvalOptions

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # bind to 127.0.0.1 (read when ray is imported)
ray = pytest.importorskip("ray")


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_ray_executor_runs_each_distinct_job_once(lm_family, local_ray, tmp_path):  # noqa: F811
    models = [lm_family["base"], lm_family["experts"][1], lm_family["copy"], lm_family["experts"][0]]
    summary = evaluate_models(models, lm_family["suite"], tmp_path / "out", EvalOptions(executor="ray", limit=3))
    assert summary["jobs"] == 3 and summary["ran"] == 3 and summary["ok"] == 3 and not summary["failed"]
    assert summary["index"][lm_family["copy"]] == summary["index"][lm_family["experts"][0]]
    assert local_ray.get_runtime_context().gcs_address.startswith("127.0.0.1")
    assert evaluate_models(models, lm_family["suite"], tmp_path / "out",
                           EvalOptions(executor="ray", limit=3))["ran"] == 0
