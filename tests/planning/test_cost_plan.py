"""The cost plan of a dry run (wildmerge/planning/cost.py) against numbers computed by hand."""

import json

import pytest
from dataclasses import replace

from wildmerge.cli import main
from wildmerge.planning import cost

QWEN3_4B = {"model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
            "tie_word_embeddings": True}
TINY = {"model_type": "llama", "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 1, "num_key_value_heads": 1, "vocab_size": 10, "tie_word_embeddings": True}


def test_parameters_from_config_match_the_published_counts():
    assert cost.parameters_from_config(QWEN3_4B) == 4_022_468_096  # Qwen/Qwen3-4B's model card: 4.02B
    # attention 2*4*4 + 2*4*4, MLP 3*4*8, two norms, tied embeddings 10*4, the final norm
    assert cost.parameters_from_config(TINY) == 64 + 96 + 8 + 40 + 4


def test_suite_tokens_apply_the_limit():
    sizes = {"arc_easy": (2376, 160)}  # as a suite declares it; my_task declares none: 100 items of 100 tokens
    assert cost.suite_tokens(["arc_easy", "my_task"], sizes=sizes) == {"arc_easy": (2376, 2376 * 160),
                                                                       "my_task": (100, 10_000)}
    assert cost.suite_tokens(["arc_easy"], 0.5, sizes) == {"arc_easy": (1188, 1188 * 160)}
    assert cost.suite_tokens(["arc_easy", "my_task"], 10, sizes) == {"arc_easy": (10, 1600), "my_task": (10, 1000)}
    assert cost.suite_tokens(["arc_easy"]) == {"arc_easy": (100, 10_000)}  # no sizes handed down: the default


def test_unit_costs():
    gpu = cost.DEFAULTS["cuda"]
    rate, start = gpu.merge_s_per_gparam_read, gpu.merge_start_s
    assert cost.merge_seconds(4_000_000_000, 13, gpu) == pytest.approx(start + rate * 4 * 13)
    assert cost.merge_seconds(4_000_000_000, 13, gpu, "tsv_m") == pytest.approx(start + rate * 4 * 13 * 1.49)
    assert cost.eval_seconds(4_000_000_000, 50_000_000, gpu) == pytest.approx(0.70 + rate * 4 + 0.01 * 4e9 * 5e7 / 1e12)
    assert cost.merge_peak_bytes(100, 3, 10_000) == 100 * (3 * 4 + 2) + 10_000
    assert cost.eval_peak_bytes(1000) == 2400
    assert cost.record_bytes(2) == 2400


def test_a_merge_is_its_start_plus_its_read_times_the_methods_factor_plus_its_data_passes():
    """By hand: start 0.5 s, TA 2 s per G read, forward passes 10 s per T parameter-tokens; 1e9 parameters."""
    cal = cost.Calibration("cpu", 2.0, 0.0, 10.0, "by hand", 2.0, merge_start_s=0.5)
    assert cost.merge_seconds(10**9, 3, cal, "ta") == pytest.approx(0.5 + 2 * 3)  # 6.5
    assert cost.merge_seconds(10**9, 3, cal, "tsv_m") == pytest.approx(0.5 + 2 * 3 * 13.21)  # 79.76
    assert cost.merge_seconds(10**9, 3, cal, "ties") == pytest.approx(0.5 + 2 * 3 * 3.7)  # 22.7
    for unknown in ("model_stock", "my_recipe", None):  # no measured factor: counted as TA
        assert cost.merge_seconds(10**9, 3, cal, unknown) == pytest.approx(6.5)
    # RegMean of 2 experts: 2 passes x 2 experts x 64 texts x 256 tokens = 65,536 tokens x 1e9 parameters
    assert cost.merge_seconds(10**9, 3, cal, "regmean") == pytest.approx(6.5 + 10 * 65_536 * 1e9 / 1e12)  # 661.86
    assert cost.merge_seconds(10**9, 3, cal, "regmean", texts=10, text_tokens=20) == pytest.approx(6.5 + 8.0)
    assert cost.merge_seconds(10**9, 3, cal, "com", texts=10, text_tokens=20) == pytest.approx(6.5 + 12.0)
    assert cost.unpriced(["ta", "tsv_m", "regmean", "model_stock", "my_recipe", "ta"], cal) == ["model_stock",
                                                                                              "my_recipe"]
    gpu = cost.Calibration("cuda", 2.0, 0.0, 10.0, "by hand", 2.0, merge_start_s=0.5)
    assert cost.merge_seconds(10**9, 3, gpu, "tsv_m") == pytest.approx(0.5 + 2 * 3 * 1.49)
    assert cost.unpriced(["ta", "ties", "tsv_m"], gpu) == ["ties"]  # TIES is measured on the CPU only
    fitted = cost.Calibration("cpu", 2.0, 0.0, 10.0, "by hand", 2.0, merge_start_s=0.5,
                              method_rates=(("model_stock", 4.0), ("regmean", 7.0)))
    assert cost.merge_seconds(10**9, 3, fitted, "model_stock") == pytest.approx(0.5 + 4 * 3)  # the run's own rate
    assert cost.merge_seconds(10**9, 3, fitted, "regmean") == pytest.approx(0.5 + 7 * 3)  # its data included
    assert cost.merge_seconds(10**9, 3, fitted, "tsv_m") == pytest.approx(79.76)  # not in the run: the table
    assert cost.unpriced(["model_stock", "star"], fitted) == ["star"]
    study = cost.Study(10**9, [cost.Merge("ta", 3), cost.Merge("tsv_m", 3), cost.Merge("regmean", 3, 10)], 0, 0, 20)
    assert cost.executor_time(study, cal, cost.Executor("cpu", 1))["merge_s"] == pytest.approx(6.5 + 79.76 + 14.5)


def test_an_evaluation_in_bfloat16_is_priced_by_its_measured_factor():
    cpu = cost.DEFAULTS["cpu"]
    scoring = cpu.eval_s_per_tparam_token * 134_515_008 * 45_000 / 1e12
    fixed = cpu.eval_start_s + cost.read_seconds(134_515_008, 1, cpu)
    assert cost.eval_seconds(134_515_008, 45_000, cpu) == pytest.approx(fixed + scoring)
    assert cost.eval_seconds(134_515_008, 45_000, cpu, "bfloat16") == pytest.approx(fixed + 0.52 * scoring)
    assert cost.eval_seconds(134_515_008, 45_000, cpu, "float16") == pytest.approx(fixed + scoring)  # unmeasured: 1
    # a calibration measured in bfloat16 prices float32 back up; the GPU table has no factor
    own = replace(cpu, eval_dtype="bfloat16")
    assert cost.dtype_factor("float32", own) == pytest.approx(1 / 0.52) and cost.dtype_factor("bfloat16", own) == 1
    assert cost.dtype_factor("bfloat16", cost.DEFAULTS["cuda"]) == 1
    assert all(f.source for table in cost.EVAL_DTYPE_FACTORS.values() for f in table.values())


def test_the_smollm2_dry_run_prices_its_suites_dtype(capsys):
    """The shipped smollm2_bf16 suite's plan on this machine's CPU is its float32 suite's with 0.52 x the scoring."""
    plans = {}
    for suite in ("smollm2", "smollm2_bf16"):
        assert main(["sample", "--base", "smollm2", "--methods", "ta", "--suite", suite, "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert f"weights in {'bfloat16' if suite.endswith('bf16') else 'float32'}" in out
        plans[suite] = next(line for line in out.splitlines() if "this machine, CPU" in line)
    assert plans["smollm2"] != plans["smollm2_bf16"]


def test_every_factor_and_data_method_says_where_it_comes_from():
    for device, table in cost.METHOD_FACTORS.items():
        assert table["ta"].value == 1.0 and all(f.value >= 1.0 and f.source for f in table.values()), device
    assert all(d.passes > 0 and d.texts > 0 and d.source for d in cost.DATA_PASSES.values())
    assert set(cost.DATA_PASSES) == {"regmean", "mats", "com", "fisher", "prodistill", "localize_stitch_trained",
                                     "adamerging", "adamerging_pp"}


def test_the_default_rates_solve_the_measurements_they_state():
    """cost.py's comment: start + read x rate for TA's anchor merge and the demo job's 35 merges (float64)."""
    import numpy as np

    seven = ("ta", "ties", "model_stock", "tsv_m", "iso_c", "ta_sb", "ties_sb")
    demo_reads = 1_820_736 * (3 + 3 + 5 + 5 + 13) / 1e9  # per method: two subsets of 2 and of 4, all 12
    for device, anchor, demo_s in (("cpu", (55.7e6 * 13 / 1e9, 2.12), 10.24),
                                   ("cuda", (142.9e6 * 13 / 1e9, 3.58), 10.3)):
        table = cost.METHOD_FACTORS[device]
        weighted = demo_reads * sum(table[m].value if m in table else 1.0 for m in seven)
        start, rate = np.linalg.solve(np.array([[1.0, anchor[0]], [35.0, weighted]]), np.array([anchor[1], demo_s]))
        cal = cost.DEFAULTS[device]
        assert cal.merge_start_s == pytest.approx(start, abs=0.005) and cal.merge_s_per_gparam_read == pytest.approx(
            rate, abs=0.005), device


def _reference_fit(points, default_start):
    """Weighted least squares (weights 1 / seconds^2) with a shared start and one rate per method, written
    independently (numpy, float64); a start below 0 (or one the reads cannot tell) is fixed and each rate fitted
    through it; rates below 0 are 0."""
    import numpy as np

    methods = sorted({m for m, _, _ in points})
    X = np.array([[1.0] + [g if m == k else 0.0 for k in methods] for m, g, _ in points])
    y = np.array([s for _, _, s in points])
    root_w = 1 / np.maximum(y, 1e-3)
    if np.linalg.matrix_rank(X) == X.shape[1]:
        start = max(np.linalg.lstsq(X * root_w[:, None], y * root_w, rcond=None)[0][0], 0.0)
    else:
        start = min(default_start, y.min())
    rates = {}
    for k in methods:
        rows = [i for i, (m, _, _) in enumerate(points) if m == k]
        g, s, r = X[rows, 1 + methods.index(k)], y[rows], root_w[rows]
        rates[k] = max(float(np.linalg.lstsq((g * r)[:, None], (s - start) * r, rcond=None)[0][0]), 0.0)
    return start, rates


def test_fit_merges_is_least_squares_with_one_start_and_a_rate_per_method():
    """Relative errors: a slow, noisy method (here 100x slower, 30% noise) does not set the fast ones' start."""
    import numpy as np

    rng = np.random.default_rng(0)
    exact = [("ta", g, 0.4 + 2.0 * g) for g in (0.1, 0.3, 0.9)] + [("tsv_m", g, 0.4 + 26.0 * g) for g in (0.2, 0.6)]
    start, rates = cost.fit_merges(exact, 9.0)
    assert start == pytest.approx(0.4) and rates == pytest.approx({"ta": 2.0, "tsv_m": 26.0})
    noisy = [(m, g, s * (1 + 0.1 * rng.standard_normal())) for m, g, s in exact * 3]
    start, rates = cost.fit_merges(noisy, 9.0)
    ref_start, ref_rates = _reference_fit(noisy, 9.0)
    assert start == pytest.approx(ref_start) and rates == pytest.approx(ref_rates)
    one_size = [("ta", 0.5, 3.0), ("ties", 0.5, 9.0)]  # the reads cannot tell the start: the table's (at most 3 s)
    assert cost.fit_merges(one_size, 0.33) == (0.33, pytest.approx({"ta": 5.34, "ties": 17.34}))
    assert cost.fit_merges(one_size, 9.0) == (3.0, pytest.approx({"ta": 0.0, "ties": 12.0}))
    below = [("ta", 0.1, 1.0), ("ta", 1.0, 20.0)]  # the line crosses 0 below zero: start 0, the rate through it
    start, rates = cost.fit_merges(below, 0.33)
    assert start == 0.0 and rates["ta"] == pytest.approx(_reference_fit(below, 0.33)[1]["ta"])
    fast = [("ta", g, 0.3 + 2.0 * g) for g in (0.1, 0.2, 0.4)]
    slow = [("fisher", g, 200.0 * g * (1 + 0.3 * e)) for g, e in ((0.1, 1), (0.1, -1), (0.2, -1), (0.4, 1))]
    start, rates = cost.fit_merges(fast + slow, 9.0)
    assert (start, rates) == (pytest.approx(_reference_fit(fast + slow, 9.0)[0]),
                              pytest.approx(_reference_fit(fast + slow, 9.0)[1]))
    assert start == pytest.approx(0.3, abs=0.05) and rates["ta"] == pytest.approx(2.0, rel=0.1)


def test_executor_times():
    cal = cost.Calibration("cuda", 1.0, 10.0, 1.0, "by hand", 2.0)
    study = cost.Study(parameters=1_000_000_000, merges=[cost.Merge("ta", 3), cost.Merge(None, 5)], models_evaluated=4,
                       tokens_per_model=1_000_000)
    per_model = 10 + 1 + 1000  # start, reading 1 G parameters at 1 s per G, 1e9 x 1e6 tokens at 1 s per 1e12
    one = cost.executor_time(study, cal, cost.Executor("one", 1))
    assert one["wall_s"] == pytest.approx(8 + 4 * per_model) and one["gpu_hours"] == pytest.approx(one["wall_s"] / 3600)
    node = cost.executor_time(study, cal, cost.Executor("node", 2))
    assert node["wall_s"] == pytest.approx(4 + 2 * per_model)
    assert node["gpu_hours"] == pytest.approx(2 * node["wall_s"] / 3600)
    slurm = cost.executor_time(study, cal, cost.Executor("slurm", 4, slurm_tasks=4))
    assert slurm["wall_s"] == pytest.approx(8 + per_model + 60)  # merges on one GPU, then one round of 4 tasks
    assert slurm["gpu_hours"] == pytest.approx((8 + 4 * (per_model + 60)) / 3600)
    started = cost.executor_time(study, replace(cal, run_start_s=50.0), cost.Executor("one", 1))
    assert started["wall_s"] == pytest.approx(50 + 8 + 4 * per_model)  # the run's own start, once


def test_calibrate_from_an_earlier_run(tmp_path, capsys):
    model = tmp_path / "models" / "ta__n02_s00"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(TINY))
    (model / "merge_info.json").write_text(json.dumps({"seconds": 3.0, "experts": ["a", "b"]}))  # no method: its id
    results = tmp_path / "eval" / "mine" / "results"
    results.mkdir(parents=True)
    for job, seconds in (("j1", 2.0), ("j2", 4.0)):
        (results / f"{job}.json").write_text(json.dumps({"status": "ok", "seconds": seconds, "device": "cpu",
                                                         "tasks": [{"task": "my_task"}], "settings": {}}))
    cal = cost.calibrate_from(tmp_path)
    assert cal.device == "cpu"
    # one merge of one size: the start is the table's (0.16 s), TA's rate what is left of 3 s over 212 x 3 parameters
    rate = (3.0 - 0.16) / (212 * 3 / 1e9)
    assert cal.merge_start_s == 0.16 and cal.merge_s_per_gparam_read == pytest.approx(rate)
    assert cal.method_rates == (("ta", pytest.approx(rate)),)
    assert cal.eval_start_s == pytest.approx(2.0 - (3.0 - 0.16) / 3)  # the fastest job less reading 212 parameters
    assert cal.eval_s_per_tparam_token == pytest.approx((6.0 - 2 * 2.0) / (212 * 20_000 / 1e12))
    # and through the dry run: the CPU plan uses the run's rates, and says so
    assert main(["sample", "--dry-run", "--out", str(tmp_path / "new"), "--calibrate-from", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (f"rates (cpu): from run {tmp_path} (--calibrate-from): 2 timed evaluation(s), 1 timed merge(s) on cpu "
            f"(ta;") in out
    assert f"merges (cpu): 0.16 s each + {rate:.3g} s per G parameters read x the method's factor: " \
           f"ta {rate:.3g} s per G read (fitted), ties x3.7," in out


def test_calibrate_from_a_real_run_fits_its_own_merge_records(tiny_family, tmp_path, capsys):
    """A real `wildmerge sample` of three methods at two sizes (merges of 2 and of 3 experts): the start and each
    method's rate are the least-squares fit of its merge_info.json records; methods it lacks keep the table."""
    from helpers import sample, write_pool

    run = tmp_path / "run"
    assert sample(write_pool(tmp_path, tiny_family), run, "--sizes", "2,3") == 0
    records = [json.loads(p.read_text()) for p in sorted((run / "models").glob("*/merge_info.json"))]
    assert {r["method"] for r in records} == {"ta", "ties", "iso_c"} and {len(r["experts"]) for r in records} == {2, 3}
    params = cost.parameters_from_config(json.loads(next((run / "models").glob("*/config.json")).read_text()))
    points = [(r["method"], params * (len(r["experts"]) + 1) / 1e9, r["seconds"]) for r in records]
    start, rates = _reference_fit(points, cost.DEFAULTS["cpu"].merge_start_s)
    cal = cost.calibrate_from(run)
    assert cal.device == "cpu" and cal.error == 1.5
    assert cal.merge_start_s == pytest.approx(start) and dict(cal.method_rates) == pytest.approx(rates)
    assert cal.merge_s_per_gparam_read == pytest.approx(rates["ta"])
    for r in records:  # each method at its own fitted rate
        want = start + rates[r["method"]] * params * (len(r["experts"]) + 1) / 1e9
        assert cost.merge_seconds(params, len(r["experts"]) + 1, cal, r["method"]) == pytest.approx(want)
    assert cost.merge_seconds(params, 4, cal, "tsv_m") == pytest.approx(start + rates["ta"] * params * 4 / 1e9 * 13.21)
    assert cal.eval_start_s == cost.DEFAULTS["cpu"].eval_start_s  # not evaluated: the evaluations keep the default
    assert main(["sample", "--dry-run", "--out", str(tmp_path / "new"), "--calibrate-from", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{len(records)} timed merge(s) on cpu (iso_c, ta, ties;" in out
    assert "ties " in out and "s per G read (fitted)" in out and "tsv_m x13.21" in out


def test_calibrate_from_an_empty_folder_says_what_to_give(tmp_path):
    from wildmerge.errors import ConfigError

    with pytest.raises(ConfigError, match="no merged model with a config.json"):
        cost.calibrate_from(tmp_path)


def test_the_demo_dry_run_prints_its_cost(tmp_path, capsys):
    assert main(["sample", "--dry-run", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "cost plan (0.00182 B parameters, from the pool's base.parameters)" in out
    assert "evaluations: 48 models x 6 tasks x 580 items" in out
    assert "merges: 35 to do, reading 3-13 models each" in out
    # the CPU estimate of the demo main job, by hand: 35 merges of 0.16 s, then 2.71 s per G read x each method's
    # factor (TA 1, TIES 3.7, Model Stock unmeasured 1, TSV-M 13.21, Iso-C 3.8, TA+SB 4.04, TIES+SB 6.74) over its
    # 29 models read; 48 evaluations of a 0.15 s start, a read and 0.06M tokens at 14.5 s per T parameter-tokens;
    # the run's 9 s start
    reads = 29 * 1_820_736 / 1e9
    # 29 models read; 48 evaluations of a read and the demo tasks' counted tokens at 12.8 s per T parameter-tokens;
    # the run's 18 s start
    merges = 35 * 0.16 + 2.71 * reads * (1 + 3.7 + 1 + 13.21 + 3.8 + 4.04 + 6.74)  # 10.4 s
    tokens = 100 * 42 + 100 * 21 + 100 * 68 + 80 * 45 + 100 * 64 + 100 * 42
    evals = 48 * (2.71 * 1_820_736 / 1e9 + 12.8 * 1_820_736 * tokens / 1e12)  # 31 s
    assert round(merges) == 10 and round(evals) == 31  # measured 57.3 s in all, quiet (docs/results.md)
    assert round(18 + merges + evals) == 59  # the plan / measured: 1.03
    assert (f"{'this machine, CPU:':<32} {'59 s':>10} wall (merges {merges:.0f} s, evaluations {evals:.0f} s)"
            in out)
    assert ("merges (cpu): 0.16 s each + 2.71 s per G parameters read x the method's factor: ta x1, ties x3.7, "
            "tsv_m x13.21, iso_c x3.8, ta_sb x4.04, ties_sb x6.74; priced as TA (no measured factor on cpu): "
            "model_stock") in out
    assert "priced as TA (no measured factor on cuda): ties, model_stock, ties_sb" in out


def test_the_cpu_plan_follows_the_evaluation_workers_asked_for(tmp_path, capsys):
    """The CPU rates are the throughput of the default workers (one per core); with fewer each evaluation takes
    default / workers as long (measured: one worker 2.13x two on 2 cores), and the line says so."""
    import re

    from wildmerge.eval.local import default_workers
    from wildmerge.planning.dryrun import _duration

    lines = {}
    for workers in (None, 1):
        args = ["sample", "--dry-run", "--out", str(tmp_path / f"run{workers}")]
        assert main(args + (["--workers", str(workers)] if workers else [])) == 0
        lines[workers] = next(line for line in capsys.readouterr().out.splitlines() if "this machine, CPU" in line)
    default = cost.Scoring(["demo_arithmetic"])
    slowed = replace(default, cpu_workers=1, cpu_default_workers=default_workers())
    assert cost.cpu_eval_slowdown(default) == 1.0
    assert cost.cpu_eval_slowdown(slowed) == default_workers()
    assert cost.cpu_eval_slowdown(replace(slowed, cpu_workers=8)) == 1.0  # more workers: not priced faster
    evals = {w: re.search(r"evaluations (\d+ (?:s|min))", line).group(1) for w, line in lines.items()}
    base = 48 * (2.71 * 1_820_736 / 1e9 + 12.8 * 1_820_736 * 27_300 / 1e12)  # the demo test's by-hand figure
    assert evals[None] == _duration(base)
    assert evals[1] == _duration(base * default_workers())
    if default_workers() > 1:
        assert f"1 evaluation worker(s) against the default {default_workers()}: x{default_workers()}" in lines[1]
    else:
        assert "worker" not in lines[1]


def test_a_data_based_merge_is_priced_by_its_passes_and_the_dry_run_says_so(tmp_path, capsys):
    """The embedded families' texts are short: their data passes are priced at 20 tokens a text."""
    assert main(["sample", "--dry-run", "--methods", "ta,regmean,star", "--sizes", "2", "--k", "1",
                 "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "regmean +2 forward passes per text of each expert (20 tokens a text" in out
    assert "priced as TA (no measured factor on cpu): star" in out
    # by hand: one subset of 2 and the full pool of 12 (3 and 13 models read), each merged by the three methods at
    # 0.16 s + 2.71 s per G read; regmean adds 2 passes x (2 + 12) experts x 64 texts x 20 tokens at 12.8 s per T
    merges = 6 * 0.16 + 3 * 2.71 * (3 + 13) * 1_820_736 / 1e9 + 12.8 * 1_820_736 * 2 * 14 * 64 * 20 / 1e12
    assert round(merges, 1) == 2.0
    assert f"(merges {merges:.0f} s," in out


def test_a_hub_pool_is_costed_from_its_declared_size(tmp_path, capsys):
    assert main(["sample", "--base", "qwen3-4b", "--evaluate", "--suite", "paper16", "--dry-run",
                 "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "cost plan (4.02 B parameters" in out and "545 models x 16 tasks" in out
    for line in ("one GPU:", "a node, 8 GPUs (local):", "Ray, 8 GPUs:", "Slurm array, 64 tasks:"):
        assert line in out


def test_the_four_base_study_in_the_docs_is_what_the_dry_runs_print(tmp_path, capsys):
    """docs/evaluation.md's table of the paper's four bases comes from these commands, number for number."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "evaluation.md").read_text()
    section = doc.split("### The four-base study on paper")[1].split("\n### ")[0]
    rows = [line.strip("|").split("|") for line in section.splitlines()
            if line.startswith(("| llama-3", "| qwen3-"))]
    assert [r[0].strip() for r in rows] == ["llama-3.2-3b", "qwen3-4b", "llama-3.1-8b", "qwen3-8b"]
    for base, params, disk, node, slurm, jobs in ([c.strip() for c in r] for r in rows):
        assert main(["sample", "--base", base, "--evaluate", "--suite", "paper16", "--dry-run",
                     "--out", str(tmp_path / base)]) == 0
        out = capsys.readouterr().out
        lines = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in out.splitlines() if ":" in line}
        assert f"cost plan ({params.replace(' B', '')} B parameters" in out
        assert f"disk: {disk} of merged checkpoints" in out
        assert lines["a node, 8 GPUs (local)"] == node and lines["Slurm array, 64 tasks"] == slurm
        wall, peak = jobs.rstrip(")").split(" (")  # merged models as Slurm jobs: their wall, their peak disk
        assert lines["Slurm, 64 model jobs"].startswith(wall + ",") and f"at most 64 at once, {peak})" in out


def test_the_guided_search_plan_in_the_docs_is_what_plan_search_gives():
    """docs/evaluation.md's search-against-protocol table: the protocol's GPU-hours on one GPU (cost.executor_time)
    and the search's at 1/5 of its evaluations as `wildmerge search --base BASE --budget 109 --dry-run` plans and
    prices it (its default arms, the experts screened first: search.plan), number for number."""
    from pathlib import Path

    import yaml

    from wildmerge.eval.suites import task_sizes
    from wildmerge.pools import load_pool
    from wildmerge.search.defaults import default_methods
    from wildmerge.search.plan import plan_search, search_seconds, search_space

    root = Path(__file__).resolve().parents[2]
    section = (root / "docs" / "evaluation.md").read_text().split("### The guided search's plan beside the protocol's")[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.split("\n## ")[0].splitlines()
            if line.startswith(("| llama-3", "| qwen3-"))]
    assert [r[0] for r in rows] == ["llama-3.2-3b", "qwen3-4b", "llama-3.1-8b", "qwen3-8b"]
    tasks = [t["task"] if isinstance(t, dict) else t for t in yaml.safe_load((root / "merge_recipes" / "suites" /
                                                                            "paper16.yml").read_text())["tasks"]]
    scored = cost.suite_tokens(tasks, sizes=task_sizes("paper16"))
    items, tokens = {t: i for t, (i, _) in scored.items()}, sum(t for _, t in scored.values())
    seven = ("ta", "ties", "model_stock", "tsv_m", "iso_c", "ta_sb", "ties_sb")
    merges = [cost.Merge(m, n + 1) for m in seven for n in (2, 4, 6, 8, 10) for _ in range(15)]
    merges += [cost.Merge(m, 13) for m in seven]  # 532 merges
    cal, total = cost.DEFAULTS["cuda"], 0.0
    for base, protocol, search, ratio in rows:
        pool = load_pool(base)
        arms = default_methods(pool)[0]
        assert arms == ["ta", "ties", "regmean", "com"] and len(pool.experts) == 12  # what the command runs
        plan = plan_search(items, 545 / 5, screen=12, space=search_space(12, len(arms), True))
        assert (plan.screened, plan.brackets, plan.merges, plan.jobs, round(plan.full_evaluations)) == \
            (12, 27, 211, 409, 108)
        params = pool.base.parameters
        p = cost.executor_time(cost.Study(params, merges, 545, tokens), cal, cost.Executor("one", 1))
        s = search_seconds(plan, params, tokens, (2 + 12) / 2 + 1, cal, arms)  # the base and 7 experts a merge
        total += s["wall_s"] / 3600
        assert protocol.startswith(f"{p['gpu_hours']:.1f}")
        assert f"{p['merge_s'] / 3600:.1f}" in protocol and f"{p['eval_s'] / 3600:.1f})" in protocol
        assert search.startswith(f"{s['wall_s'] / 3600:.1f}") and f"{s['merge_s'] / 3600:.1f}" in search
        assert f"{s['eval_s'] / 3600:.1f})" in search
        assert ratio == f"{s['wall_s'] / p['gpu_hours'] / 3600:.2f}"
    assert f"**{total:,.0f} GPU-hours**" in section


def test_the_method_facts_are_read_from_the_method_recipes(tmp_path):
    """Each factor and data pass is its recipe's ``cost:`` (merge_recipes/methods/<name>.yml), nothing in code; a
    recipe's ``cost`` is never part of what a run records; a bad one is one clear error."""
    import yaml

    from wildmerge.errors import ConfigError
    from wildmerge.paths import recipes_dir
    from wildmerge.recipes.method import MethodCost, load_method_recipe

    stated = {p.stem: yaml.safe_load(p.read_text()).get("cost") for p in (recipes_dir() / "methods").glob("*.yml")}
    for device, table in cost.METHOD_FACTORS.items():
        for method, f in table.items():
            assert (f.value, f.source) == tuple(stated[method]["factors"][device][k] for k in ("value", "source"))
    for method, d in cost.DATA_PASSES.items():
        assert (d.passes, d.texts, d.source) == tuple(stated[method]["data_passes"][k]
                                                      for k in ("passes", "texts", "source"))
    assert cost.METHOD_FACTORS["cpu"]["iso_c"].value == 3.80 and cost.DATA_PASSES["com"].passes == 3  # as measured
    assert "cost" not in load_method_recipe("iso_c").model_dump()
    with pytest.raises(ValueError, match="greater than 0"):
        MethodCost.model_validate({"factors": {"cpu": {"value": 0, "source": "x"}}})
    bad = tmp_path / "m.yml"
    bad.write_text("name: m\nlabel: M\nrecipe: {merge_method: linear}\ncost: {factors: {tpu: {value: 2, source: x}}}\n")
    with pytest.raises(ConfigError, match="method recipe .* is invalid"):
        load_method_recipe(bad)
