"""The cost plan of merged models as cluster jobs: each job merges then scores on its own GPU, the base and experts
follow as evaluation jobs; checked against the rates written out by hand."""

import math

from wildmerge.planning import cost


def test_model_jobs_are_priced_with_their_merges_on_the_cluster():
    cal = cost.DEFAULTS["cuda"]
    study = cost.Study(4_000_000_000, [cost.Merge("ta", 3)] * 10 + [cost.Merge("tsv_m", 13)] * 2, 16, 1_000_000)
    jobs = cost.executor_time(study, cal, cost.Executor("slurm", 4, 4, model_jobs=True))
    g = 4.0  # G parameters; the H100 rates of docs/evaluation.md: start 0.27 s, 1.78 s / G read, TSV-M x1.49
    ta, tsv = 0.27 + 1.78 * g * 3, 0.27 + 1.78 * g * 13 * 1.49
    per_model = 0.70 + 1.78 * g + 0.01 * 4e9 * 1e6 / 1e12  # start, read once, score the tokens
    one = (10 * ta + 2 * tsv) / 12 + per_model + 60.0  # a model job: its merge, its score, the task's start
    wall = 50.0 + math.ceil(12 / 4) * one + math.ceil(4 / 4) * (per_model + 60.0)
    assert math.isclose(jobs["wall_s"], wall, rel_tol=1e-12)
    assert math.isclose(jobs["gpu_hours"], (12 * one + 4 * (per_model + 60.0)) / 3600, rel_tol=1e-12)
    array = cost.executor_time(study, cal, cost.Executor("slurm", 4, 4))  # merges first, on the submitting node
    assert jobs["wall_s"] < array["wall_s"]
