"""Data methods that read more texts of each expert than the pool's experts have are refused at plan time, in one
line naming the methods, how many they read, the experts short of it with their counts, and the fix: on the quick
SmolLM2 family's own pool (16 texts an expert; Chain of Merges' recipe reads 64), through `wildmerge sample`, its
dry run and `wildmerge merge`, before any model is read."""

from pathlib import Path

import pytest
import yaml

from wildmerge.cli import main
from wildmerge.expert_data.count import recipe_asks, text_counts, too_few_texts
from wildmerge.families.smollm2.source import missing
from wildmerge.pools import load_pool
from wildmerge.recipes.method import load_methods


@pytest.fixture(scope="module")
def quick():
    """The quick SmolLM2 family (the default cache's: built once, reused): its own pool file, 16 texts an expert."""
    if missing():
        pytest.skip(missing())
    from wildmerge.families.smollm2.family import ensure_family

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("WILDMERGE_SMOLLM2_CACHE", raising=False)
        yield ensure_family(quick=True, progress=False)


def test_the_line_names_methods_counts_and_experts():
    assert too_few_texts({"com": 64, "ta_like": 0}, {"b": 16, "a": 16, "c": 80}) == \
        "com reads 64 texts of each expert, and b has 16, a 16"
    assert too_few_texts({"regmean": 64, "com": 64}, {"x": 10}) == "regmean and com read 64 texts of each expert, and x has 10"
    assert too_few_texts({"com": 64, "prodistill": 16, "localize": 32}, {"x": 20, "y": 8}) == \
        "com reads 64, localize 32, prodistill 16 texts of each expert, and y has 8, x 20"
    assert too_few_texts({"prodistill": 16}, {"x": 16}) is None and too_few_texts({}, {"x": 1}) is None
    assert recipe_asks(load_methods(["ta", "com", "prodistill"])) == {"com": 64, "prodistill": 16}


def test_the_quick_pool_counts_its_texts(quick):
    pool = load_pool(quick["pool_file"])
    assert text_counts(pool) == {"arithmetic": 16, "facts": 16}
    assert all(sum(1 for line in Path(quick["data"][e]["text"]).read_text().splitlines() if line.strip()) == n
               for e, n in text_counts(pool).items())
    assert text_counts(pool, kinds=("generate",)) == {}


LINE = ("too few texts in pool 'smollm2': com reads 64 texts of each expert, and arithmetic has 16, facts 16; give "
        "every expert at least that many texts in ")


def test_sample_refuses_com_before_any_work(quick, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["sample", "--pool", quick["pool_file"], "--methods", "ta,com", "--sizes", "2", "--k", "1",
                 "--no-evaluate", "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 0 and LINE in err and "lower calibration n_samples in a method recipe of your own" in err
    assert not (out / "models").exists() and not (out / "plan.json").exists()
    # prodistill reads 16: enough, so only CoM is named
    capsys.readouterr()
    assert main(["sample", "--pool", quick["pool_file"], "--methods", "prodistill", "--sizes", "2", "--k", "1",
                 "--no-evaluate", "--dry-run", "--out", str(out)]) == 0
    assert "TOO FEW TEXTS" not in capsys.readouterr().out


def test_the_dry_run_says_it_before_the_plan(quick, tmp_path, capsys):
    assert main(["sample", "--pool", quick["pool_file"], "--methods", "ta,com", "--sizes", "2", "--k", "1",
                 "--no-evaluate", "--dry-run", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    said = out.index("TOO FEW TEXTS: com reads 64 texts of each expert, and arithmetic has 16, facts 16")
    assert said < out.index("  plan:") and "(a real run stops here: give every expert at least" in out


def test_merge_refuses_every_short_model_in_one_line(quick, tmp_path, capsys):
    recipe = {"merge_method": "chain_of_merges", "base_model": quick["base"], "dtype": "float32",
              "calibration": {"n_samples": 64},
              "models": [{"model": quick["experts"][e], "calibration": quick["data"][e]["text"]}
                         for e in ("arithmetic", "facts")]}
    (tmp_path / "com.yml").write_text(yaml.safe_dump(recipe))
    code = main(["merge", str(tmp_path / "com.yml"), str(tmp_path / "out")])
    err = capsys.readouterr().err
    arithmetic, facts = quick["experts"]["arithmetic"], quick["experts"]["facts"]
    assert code != 0 and (f"too few calibration texts: chain_of_merges reads 64 texts of each expert, and "
                          f"{arithmetic} has 16, {facts} 16; give each of them at least that many") in err
    assert not (tmp_path / "out").exists()
