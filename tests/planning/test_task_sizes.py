"""Task sizes live in the suites (``items``, ``tokens_per_item``) and the callers hand them to planning/cost.py: the
cost plan of every shipped suite and pool is the one the former table in cost.py gave, number for number, but for the
large and probe suites' tasks, which the former table priced at 100 items of 100 tokens: at their declared sizes."""

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from wildmerge.cli import main
from wildmerge.planning import cost

# cost.py's table of task sizes as it stood before the sizes moved into the suites, frozen here as the reference: a
# task not in it counted 100 items of 100 tokens
FROZEN = {"arc_easy": (2376, 160), "arc_challenge": (1172, 180), "boolq": (3270, 300),
          "commonsense_qa": (1221, 200), "hellaswag": (10042, 440), "winogrande": (1267, 60),
          "piqa": (1838, 100), "openbookqa": (500, 100), "headqa": (5484, 250), "prost": (18736, 160),
          "truthfulqa_mc1": (817, 1500), "medmcqa": (4183, 240), "leaderboard_gpqa": (1192, 1000),
          "leaderboard_bbh": (5761, 2400), "mmlu": (14042, 150), "leaderboard_mmlu_pro": (12032, 1600),
          "demo_add": (100, 42), "demo_compare": (100, 21), "demo_count": (100, 68), "demo_facts": (80, 45),
          "demo_reverse": (100, 64), "demo_add_gen": (100, 42)}
LARGE_AND_PROBE = {
    "demo_large_add": (400, 42), "demo_large_compare": (1000, 20), "demo_large_reverse": (1000, 64),
    "demo_large_count": (1000, 68), "demo_large_facts": (80, 45), "demo_large_add_gen": (400, 42),
    "demo_probe_count": (100, 68), "demo_probe_add": (100, 409), "demo_probe_facts": (16, 178),
    "demo_probe_union": (216, 769), "smollm2_large_arithmetic": (1000, 73), "smollm2_large_facts": (48, 77),
    "smollm2_large_sentiment": (576, 59), "smollm2_large_topic": (240, 130), "smollm2_large_style": (504, 155),
    "smollm2_large_lexicon": (1000, 138), "smollm2_large_units": (196, 85), "smollm2_large_arithmetic_gen": (1000, 73),
    "smollm2_large_style_gen": (504, 155), "smollm2_probe_sentiment": (100, 59), "smollm2_probe_topic": (100, 130),
    "smollm2_probe_lexicon": (100, 138), "smollm2_probe_union": (300, 321)}
REFERENCE = {**FROZEN, **LARGE_AND_PROBE}


def _frozen_tokens(tasks, limit=None):
    """The former ``cost.suite_tokens``, written out from the frozen table."""
    import math

    out = {}
    for task in tasks:
        items, per_item = REFERENCE.get(task, (100, 100))
        if limit is not None:
            items = min(items, int(limit)) if limit >= 1 else math.ceil(items * limit)
        out[task] = (items, items * per_item)
    return out


def _shipped(kind):
    from wildmerge.named_files import list_names

    return list_names(kind)


@pytest.mark.parametrize("suite", _shipped("suites"))
def test_every_shipped_suite_prices_its_tasks_as_the_former_table(suite):
    from wildmerge.eval.suites import load_suite, task_sizes

    loaded = load_suite(suite)
    tasks = [t.task for t in loaded.tasks]
    for limit in (None, loaded.settings.limit, 10, 0.5):
        if limit is not None or loaded.settings.limit is None:
            assert cost.suite_tokens(tasks, limit, task_sizes(loaded)) == _frozen_tokens(tasks, limit)


def test_every_shipped_suite_and_pool_has_the_former_cost_plan(capsys):
    """The dry run's cost plan (planning/dryrun.print_cost) of each shipped suite on each shipped pool, with the
    sizes the protocol reads from the suites, printed as with the frozen table: the same text."""
    from wildmerge.eval.options import EvalOptions
    from wildmerge.planning.dryrun import print_cost
    from wildmerge.pools import load_pool
    from wildmerge.protocol import _scoring

    plans = 0
    for pool_name in _shipped("pools"):
        pool = load_pool(pool_name)
        experts = [e.label for e in pool.experts]
        merges = [SimpleNamespace(method=m, experts=experts[:n], hparams={}) for m in ("ta", "ties", "regmean")
                  for n in (2, len(experts))]
        for suite in _shipped("suites"):
            scoring = _scoring(suite, EvalOptions())
            outputs = []
            for sizes in (scoring.sizes, REFERENCE):
                print_cost(merges, 20, pool, replace(scoring, sizes=sizes))
                outputs.append(capsys.readouterr().out)
            assert outputs[0] == outputs[1], (pool_name, suite)
            plans += "cost plan" in outputs[0]
    assert plans >= 12  # the embedded families and the hub pools' declared sizes: each plan priced, not unknown


@pytest.mark.parametrize("suite", ["demo", "paper16", "medical", "smollm2"])
def test_the_search_plan_reads_the_suites_sizes(suite, capsys, monkeypatch):
    """``wildmerge search --dry-run``'s plan (search/plan.py) with the suite's sizes, against the frozen table."""
    import wildmerge.eval.suites as suites
    from wildmerge.search.plan import print_search_plan

    pool = "demo" if suite == "demo" else "smollm2" if suite == "smollm2" else "qwen3-4b"
    print_search_plan(pool, 4, suite)
    new = capsys.readouterr().out
    monkeypatch.setattr(suites, "task_sizes", lambda suite=None: REFERENCE)
    print_search_plan(pool, 4, suite)
    assert new == capsys.readouterr().out and "full evaluations of" in new


def _run_with_results(root, tasks):
    model = root / "models" / "ta__n02_s00"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 1, "num_key_value_heads": 1, "vocab_size": 10, "tie_word_embeddings": True}))
    (model / "merge_info.json").write_text(json.dumps({"seconds": 3.0, "experts": ["a", "b"]}))
    results = root / "eval" / "mine" / "results"
    results.mkdir(parents=True)
    for job, seconds in (("j1", 2.0), ("j2", 4.0)):
        (results / f"{job}.json").write_text(json.dumps({"status": "ok", "seconds": seconds, "device": "cpu",
                                                         "tasks": [{"task": t} for t in tasks], "settings": {}}))
    return root


def test_calibrate_from_prices_an_old_runs_records_by_the_suites_sizes(tmp_path):
    """An earlier run's records of paper16 and demo tasks, calibrating a plan of another suite: each record priced
    at the shipped suites' sizes (what the former table gave); a task no suite sizes counts 100 x 100, no error."""
    from wildmerge.eval.suites import task_sizes

    run = _run_with_results(tmp_path / "old", ["arc_easy", "demo_facts", "my_own_task"])
    tokens = 2 * (2376 * 160 + 80 * 45 + 100 * 100)  # two records of the three tasks, by hand
    cal = cost.calibrate_from(run, task_sizes("smollm2"))
    assert cal.eval_s_per_tparam_token == pytest.approx((6.0 - 2 * 2.0) / (212 * tokens / 1e12))
    unsized = cost.calibrate_from(run)  # no sizes handed down: every task at the documented default
    assert unsized.eval_s_per_tparam_token == pytest.approx((6.0 - 2 * 2.0) / (212 * 2 * 3 * 10_000 / 1e12))


def test_the_dry_run_hands_the_sizes_to_calibrate_from_even_unevaluated(tmp_path, capsys, monkeypatch):
    """``sample --dry-run --calibrate-from RUN``, evaluated or not, hands the suites' sizes to ``calibrate_from``:
    RUN's records are priced as the former table priced them."""
    run = _run_with_results(tmp_path / "old", ["demo_add", "arc_easy"])
    seen, real = [], cost.calibrate_from

    def spy(run_dir, sizes=None):
        seen.append(sizes)
        return real(run_dir, sizes)

    monkeypatch.setattr(cost, "calibrate_from", spy)
    for evaluated in ("--evaluate", "--no-evaluate"):
        assert main(["sample", "--dry-run", evaluated, "--out", str(tmp_path / f"new{evaluated}"),
                     "--calibrate-from", str(run)]) == 0
        assert "rates (cpu): from run" in capsys.readouterr().out
        sizes = seen[-1]
        assert (sizes["demo_add"], sizes["arc_easy"]) == (FROZEN["demo_add"], FROZEN["arc_easy"])
