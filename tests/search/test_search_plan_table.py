"""docs/search.md's table of the search's plan at 1/10 of the protocol beside the protocol's own, for the four
shipped bases: the table is what ``benchmarks/search_plan_table.py`` prints from the two dry runs, and one base's
row is the cost plan's arithmetic done again here by hand (float64, the default H100 rates)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# paper16's tasks: (items, scored tokens per item), the cost plan's table as written when the docs were made
PAPER16 = {"arc_easy": (2376, 160), "arc_challenge": (1172, 180), "boolq": (3270, 300),
           "commonsense_qa": (1221, 200), "hellaswag": (10042, 440), "winogrande": (1267, 60), "piqa": (1838, 100),
           "openbookqa": (500, 100), "headqa": (5484, 250), "prost": (18736, 160), "truthfulqa_mc1": (817, 1500),
           "medmcqa": (4183, 240), "leaderboard_gpqa": (1192, 1000), "leaderboard_bbh": (5761, 2400),
           "mmlu": (14042, 150), "leaderboard_mmlu_pro": (12032, 1600)}


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("search_plan_table", ROOT / "benchmarks" / "search_plan_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(script, tmp_path_factory):
    text = script.table(0.1, out=str(tmp_path_factory.mktemp("plans")))
    return text, {r.split(" | ")[0].strip("| "): r for r in text.splitlines()[2:]}


def test_the_docs_table_is_the_dry_runs(rows):
    assert rows[0] in (ROOT / "docs" / "search.md").read_text(), "docs/search.md's plan table differs from the script"


def test_qwen3_4b_by_hand(rows):
    """The protocol: 7 methods x (15 subsets of n = 2, 4, 6, 8, 10 and the 12), 545 models; the search: 54.5 full
    evaluations, the pool's default arms (TA, TIES, RegMean, CoM: every expert has text), priced by hand."""
    from wildmerge.search.plan import plan_search, search_space

    p = 4022468096  # Qwen3-4B, the pool's base.parameters
    start, read, eval_start, rate, run_start = 0.27, 1.78e-9, 0.70, 0.01e-12, 50.0  # cost.DEFAULTS["cuda"]
    items = sum(i for i, _ in PAPER16.values())
    tokens = sum(i * t for i, t in PAPER16.values())
    inputs = 15 * sum(n + 1 for n in (2, 4, 6, 8, 10)) + 13  # per method: experts and the base read
    factors = 1 + 1 + 1 + 1.49 + 1.03 + 1.03 + 1  # ta, ties, model_stock, tsv_m, iso_c, ta_sb, ties_sb on cuda
    merges = 7 * 76 * start + read * p * inputs * factors
    per_model = eval_start + read * p + rate * p * tokens
    protocol_h = (run_start + merges + 545 * per_model) / 3600

    plan = plan_search({t: i for t, (i, _) in PAPER16.items()}, 54.5, screen=12, space=search_space(12, 4))
    mean_inputs = (2 + 12) / 2 + 1
    data = {"ta": 0, "ties": 0, "regmean": 2, "com": 3}  # forward passes per text, 64 texts of 256 tokens
    per_merge = sum(start + read * p * mean_inputs + rate * p * passes * (mean_inputs - 1) * 64 * 256
                    for passes in data.values()) / 4
    merge_h = plan.merges * per_merge / 3600
    eval_h = (plan.jobs * (eval_start + read * p) + rate * p * tokens * plan.item_evaluations / items) / 3600
    row = rows[1]["qwen3-4b"]
    assert f"| 532, 545, {protocol_h:.1f} h | 54.5 | ta, ties, regmean, com |" in row
    assert f"| {plan.brackets}, {plan.merges}, {plan.jobs} |" in row
    assert (f"| {plan.item_evaluations / items:.3g}, {merge_h + eval_h:.1f} h ({merge_h:.1f} + {eval_h:.1f}) | "
            f"{round(merge_h + eval_h, 1) / round(protocol_h, 1):.3f} |") in row
    assert plan.item_evaluations <= 54.5 * items
    assert 0.09 < (merge_h + eval_h) / protocol_h < 0.11  # a tenth of the evaluations, a tenth of the hours
