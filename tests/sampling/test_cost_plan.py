"""The cost plan of a dry run (wildmerge/sampling/cost.py) against numbers computed by hand."""

import json

import pytest

from wildmerge.cli import main
from wildmerge.sampling import cost

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
    assert cost.suite_tokens(["arc_easy", "my_task"]) == {"arc_easy": (2376, 2376 * 160), "my_task": (100, 10_000)}
    assert cost.suite_tokens(["arc_easy"], 0.5) == {"arc_easy": (1188, 1188 * 160)}
    assert cost.suite_tokens(["arc_easy", "my_task"], 10) == {"arc_easy": (10, 1600), "my_task": (10, 1000)}


def test_unit_costs():
    gpu = cost.DEFAULTS["cuda"]
    rate = gpu.merge_s_per_gparam_read
    assert cost.merge_seconds(4_000_000_000, 13, gpu) == pytest.approx(rate * 4 * 13)
    assert cost.eval_seconds(4_000_000_000, 50_000_000, gpu) == pytest.approx(10 + rate * 4 + 0.01 * 4e9 * 5e7 / 1e12)
    assert cost.merge_peak_bytes(100, 3, 10_000) == 100 * (3 * 4 + 2) + 10_000
    assert cost.eval_peak_bytes(1000) == 2400
    assert cost.record_bytes(2) == 2400


def test_executor_times():
    cal = cost.Calibration("cuda", 1.0, 10.0, 1.0, "by hand", 2.0)
    study = cost.Study(parameters=1_000_000_000, merge_inputs=[3, 5], models_evaluated=4, tokens_per_model=1_000_000)
    per_model = 10 + 1 + 1000  # start, reading 1 G parameters at 1 s per G, 1e9 x 1e6 tokens at 1 s per 1e12
    one = cost.executor_time(study, cal, cost.Executor("one", 1))
    assert one["wall_s"] == pytest.approx(8 + 4 * per_model) and one["gpu_hours"] == pytest.approx(one["wall_s"] / 3600)
    node = cost.executor_time(study, cal, cost.Executor("node", 2))
    assert node["wall_s"] == pytest.approx(4 + 2 * per_model)
    assert node["gpu_hours"] == pytest.approx(2 * node["wall_s"] / 3600)
    slurm = cost.executor_time(study, cal, cost.Executor("slurm", 4, slurm_tasks=4))
    assert slurm["wall_s"] == pytest.approx(8 + per_model + 60)  # merges on one GPU, then one round of 4 tasks
    assert slurm["gpu_hours"] == pytest.approx((8 + 4 * (per_model + 60)) / 3600)


def test_calibrate_from_an_earlier_run(tmp_path, capsys):
    model = tmp_path / "models" / "ta__n02_s00"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(TINY))
    (model / "merge_info.json").write_text(json.dumps({"seconds": 3.0, "experts": ["a", "b"]}))
    results = tmp_path / "eval" / "mine" / "results"
    results.mkdir(parents=True)
    for job, seconds in (("j1", 2.0), ("j2", 4.0)):
        (results / f"{job}.json").write_text(json.dumps({"status": "ok", "seconds": seconds, "device": "cpu",
                                                         "tasks": [{"task": "my_task"}], "settings": {}}))
    cal = cost.calibrate_from(tmp_path)
    assert cal.device == "cpu"
    assert cal.merge_s_per_gparam_read == pytest.approx(3.0 / (212 * 3 / 1e9))
    assert cal.eval_start_s == pytest.approx(2.0 - 1.0)  # the fastest job less reading 212 parameters (1 s)
    assert cal.eval_s_per_tparam_token == pytest.approx((6.0 - 2 * 2.0) / (212 * 20_000 / 1e12))
    # and through the dry run: the CPU plan uses the run's rates, and says so
    assert main(["sample", "--dry-run", "--out", str(tmp_path / "new"), "--calibrate-from", str(tmp_path)]) == 0
    assert f"rates (cpu): --calibrate-from {tmp_path}: 2 timed evaluation(s)" in capsys.readouterr().out


def test_calibrate_from_an_empty_folder_says_what_to_give(tmp_path):
    from wildmerge.errors import ConfigError

    with pytest.raises(ConfigError, match="no merged model with a config.json"):
        cost.calibrate_from(tmp_path)


def test_the_demo_dry_run_prints_its_cost(tmp_path, capsys):
    assert main(["sample", "--dry-run", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "cost plan (0.00182 B parameters, from the pool's base.parameters)" in out
    assert "evaluations: 48 models x 6 tasks x 600 items" in out
    assert "merges: 35 to do, reading 3-13 models each" in out
    # the CPU estimate of the demo main job: merges 51.4 s per G read; 48 x (read + 0.06M tokens)
    reads = sum((n + 1) * 1_820_736 for n in (2, 2, 4, 4, 12)) * 7
    per_model = 51.4 * 1_820_736 / 1e9 + 20.0 * 1_820_736 * 60_000 / 1e12
    minutes = (51.4 * reads / 1e9 + 48 * per_model) / 60
    assert round(minutes) == 2  # measured 1.6 min quiet (docs/evaluation.md: plan / measured 1.30)
    assert f"this machine, CPU, one worker:        {minutes:.0f} min wall" in out


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
    for base, params, disk, node, slurm in ([c.strip() for c in r] for r in rows):
        assert main(["sample", "--base", base, "--evaluate", "--suite", "paper16", "--dry-run",
                     "--out", str(tmp_path / base)]) == 0
        out = capsys.readouterr().out
        lines = {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in out.splitlines() if ":" in line}
        assert f"cost plan ({params.replace(' B', '')} B parameters" in out
        assert f"disk: {disk} of merged checkpoints" in out
        assert lines["a node, 8 GPUs (local)"] == node and lines["Slurm array, 64 tasks"] == slurm


def test_the_guided_search_plan_in_the_docs_is_what_plan_search_gives():
    """docs/evaluation.md's search-against-protocol table: the protocol's GPU-hours on one GPU (cost.executor_time)
    and the search's at 1/5 of its evaluations (search.plan), number for number."""
    from pathlib import Path

    import yaml

    from wildmerge.search.plan import plan_search, search_seconds

    root = Path(__file__).resolve().parents[2]
    section = (root / "docs" / "evaluation.md").read_text().split("### The guided search's plan beside the protocol's")[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.split("\n## ")[0].splitlines()
            if line.startswith(("| llama-3", "| qwen3-"))]
    assert [r[0] for r in rows] == ["llama-3.2-3b", "qwen3-4b", "llama-3.1-8b", "qwen3-8b"]
    tasks = [t["task"] if isinstance(t, dict) else t for t in yaml.safe_load((root / "merge_recipes" / "suites" /
                                                                            "paper16.yml").read_text())["tasks"]]
    scored = cost.suite_tokens(tasks)
    items, tokens = {t: i for t, (i, _) in scored.items()}, sum(t for _, t in scored.values())
    inputs = [n + 1 for _ in range(7) for n in (2, 4, 6, 8, 10) for _ in range(15)] + [13] * 7  # 532 merges
    cal, plan = cost.DEFAULTS["cuda"], plan_search(items, 545 / 5)
    assert (plan.brackets, plan.candidates, plan.jobs) == (27, 215, 405)
    for base, protocol, search, ratio in rows:
        params = yaml.safe_load((root / "merge_recipes" / "pools" / f"{base}.yml").read_text())["base"]["parameters"]
        p = cost.executor_time(cost.Study(params, inputs, 545, tokens), cal, cost.Executor("one", 1))
        s = search_seconds(plan, params, tokens, sum(inputs) / len(inputs), cal)
        assert protocol.startswith(f"{p['gpu_hours']:.1f}")
        assert f"{p['merge_s'] / 3600:.1f}" in protocol and f"{p['eval_s'] / 3600:.1f})" in protocol
        assert search.startswith(f"{s['wall_s'] / 3600:.1f}") and f"{s['merge_s'] / 3600:.1f}" in search
        assert ratio == f"{s['wall_s'] / p['gpu_hours'] / 3600:.2f}"
