"""Method recipes have one home: names by paper with the old names as aliases that keep merge ids (so old runs
resume on the same folders), labels and table order from the recipe files, and one loader of named YAML files for
methods, pools and suites with the same errors."""

import json

import pytest
from safetensors.torch import load_file

from helpers import write_pool
from wildmerge.cli import main
from wildmerge.errors import ConfigError
from wildmerge.eval.suites import load_suite
from wildmerge.recipes.labels import display_rank, method_label, table_order
from wildmerge.recipes.method import ALIASES, list_method_recipes, load_method_recipe, load_methods, merge_id
from wildmerge.pools import load_pool


def test_old_names_load_the_renamed_recipe_under_their_own_name():
    names = list_method_recipes()
    assert {"zhou2026_ta", "zhou2026_ties", "zhou2026_dare", "zhou2026_wa"} <= set(names)
    assert not any(n.startswith("s001_") for n in names)  # aliases are not listed
    for old, new in ALIASES.items():
        alias, current = load_method_recipe(old), load_method_recipe(new)
        assert current.name == new and alias.name == old
        assert alias.model_dump(exclude={"name"}) == current.model_dump(exclude={"name"})
    methods = load_methods(["s001_ta", "ta"])
    assert list(methods) == ["s001_ta", "ta"] and methods["s001_ta"].name == "s001_ta"
    assert merge_id(methods["s001_ta"].name, "n02_s00", {}) == "s001_ta__n02_s00"  # the folder of an old run


def test_labels_and_order_for_tables():
    assert method_label("s001_wa") == method_label("zhou2026_wa") == "WA"
    assert method_label("ta") == "TA" and method_label("ensemble") == "Ensemble"
    assert method_label("gone_method") == "gone_method" and method_label(None) == ""
    order = table_order()  # the recipe files' table_order: the paper's table, then the data-based methods
    assert order == ("ta", "model_stock", "ties", "ta_sb", "ties_sb", "tsv_m", "iso_c", "iso_cts", "regmean", "com",
                     "mats", "fisher", "prodistill", "adamerging", "adamerging_pp")
    assert [display_rank(m) for m in order] == list(range(len(order)))
    assert display_rank("zhou2026_ta") == display_rank(float("nan")) == len(order)
    assert [method_label(m) for m in order] == [load_method_recipe(m).label for m in order]


@pytest.mark.parametrize("load,kind,typo,close", [
    (load_method_recipe, "method", "zhou2026_tie", "zhou2026_ties"),
    (load_pool, "pool", "qwen3-4", "qwen3-4b"),
    (load_suite, "suite", "paper61", "paper16"),
])
def test_one_loader_for_named_files(tmp_path, load, kind, typo, close):
    with pytest.raises(ConfigError, match=rf"unknown {kind} '{typo}' \(did you mean '{close}'\?\); valid {kind}s: "):
        load(typo)
    with pytest.raises(ConfigError, match=rf"{kind} file '{tmp_path}/missing.yml' does not exist"):
        load(str(tmp_path / "missing.yml"))
    broken = tmp_path / "broken.yml"
    broken.write_text("name: x\ntasks: [a\n")
    with pytest.raises(ConfigError) as info:
        load(str(broken))
    message = str(info.value)
    assert "\n" not in message and str(broken) in message and "not valid YAML at line 3" in message


def test_a_run_planned_with_an_old_name_resumes_on_its_folders(tiny_family, tmp_path, capsys):
    """An old run's plan names ``s001_wa``: a rerun merges nothing again; the new name gives the same weights."""
    pool, run = write_pool(tmp_path, tiny_family), tmp_path / "run"
    argv = ["sample", "--base", pool, "--out", str(run), "--sizes", "1", "--k", "1", "--no-evaluate"]
    assert main([*argv, "--methods", "s001_wa"]) == 0
    plan = json.loads((run / "plan.json").read_text())
    merge = next(e for e in plan["entries"] if e["kind"] == "merge")
    assert merge["model_id"] == "s001_wa__n03_full" and merge["method"] == "s001_wa" and merge["label"] == "WA"
    capsys.readouterr()
    assert main([*argv, "--methods", "s001_wa"]) == 0
    assert "merges: 0 new, 0 redone, 1 already done" in capsys.readouterr().out
    assert main([*argv, "--methods", "s001_wa,zhou2026_wa"]) == 0
    old = load_file(str(run / "models" / "s001_wa__n03_full" / "model.safetensors"))
    new = load_file(str(run / "models" / "zhou2026_wa__n03_full" / "model.safetensors"))
    assert old.keys() == new.keys() and all(old[k].equal(new[k]) for k in old)
