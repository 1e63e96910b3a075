"""`calibration: generate`: each expert's own text, sampled from it with a fixed seed, cached in the run folder,
used by RegMean / CoM merges of the sampler."""

import json
from pathlib import Path

import pytest
import yaml

from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.cli import main
from wildmerge.errors import ConfigError
from wildmerge.expert_data import generate
from wildmerge.expert_data.generate import GenerateSpec, ensure_generated, sample_texts
from wildmerge.expert_data.schema import parse_source

SMALL = {"n_samples": 6, "max_new_tokens": 8, "prompts": ["", "The sky is", "Two plus two is"]}


def _pool(tmp_path, fam, calibration):
    pool = {"name": "gen", "base": {"model": fam["base"]}, "calibration": calibration,
            "experts": [{"model": e, "name": f"x{i}"} for i, e in enumerate(fam["experts"])]}
    path = tmp_path / "pool.yml"
    path.write_text(yaml.safe_dump(pool))
    return str(path)


def test_spec_forms_and_errors():
    assert parse_source("generate", "x").generate == GenerateSpec()
    assert parse_source({"generate": {"n_samples": 3}}, "x").generate.n_samples == 3
    assert parse_source({"generate": None}, "x").generate == GenerateSpec()
    assert parse_source("data.jsonl", "x").kind == "file" and parse_source({"data": "x.jsonl"}, "x").kind == "file"
    with pytest.raises(ConfigError, match="n_sample.*did you mean 'n_samples'.*valid keys: n_samples"):
        parse_source({"generate": {"n_sample": 3}}, "x")


def test_sampling_is_seeded_and_follows_the_expert(lm_family):  # noqa: F811
    spec = GenerateSpec(**SMALL)
    a = sample_texts(lm_family["experts"][0], spec)
    assert len(a) == 6 and [r["prompt"] for r in a] == ["", "", "The sky is", "The sky is", "Two plus two is",
                                                        "Two plus two is"]
    assert a == sample_texts(lm_family["experts"][0], spec)  # same seed, same text
    assert a != sample_texts(lm_family["experts"][1], spec)  # another expert writes other text
    assert a != sample_texts(lm_family["experts"][0], spec.model_copy(update={"seed": 1}))


def test_sampler_merges_com_with_generated_text(lm_family, tmp_path, capsys):  # noqa: F811
    pool = _pool(tmp_path, lm_family, {"generate": SMALL})
    run = tmp_path / "run"
    argv = ["sample", "--base", pool, "--out", str(run), "--methods", "com", "--no-evaluate", "--sizes", "1"]
    assert main(argv) == 0
    files = sorted((run / "calibration").glob("*.generated-*.jsonl"))
    assert [f.name.split(".")[0] for f in files] == ["x0", "x1"]
    assert all(len(f.read_text().splitlines()) == 6 for f in files)
    diag = json.loads(next(run.glob("models/com__*/layerwise_diagnostics.json")).read_text())
    assert sorted(Path(c["data"]).name for c in diag["calibration"]) == [f.name for f in files]
    recipe = next(run.glob("models/com__*/recipe.yml")).read_text()
    assert ".generated-" in recipe
    before = [f.stat().st_mtime_ns for f in files]
    capsys.readouterr()
    assert main(argv) == 0  # rerun: the cached text, the done merge
    assert "0 new, 0 redone, 1 already done" in capsys.readouterr().out
    assert [f.stat().st_mtime_ns for f in files] == before


def test_a_second_run_copies_the_text_the_first_drew(lm_family, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("WILDMERGE_DATA_CACHE", str(tmp_path / "cache"))
    spec, expert = GenerateSpec(**SMALL), lm_family["experts"][0]
    first = ensure_generated("x0", expert, spec, tmp_path / "run1", progress=False)
    shared = tmp_path / "cache" / "generated" / first.name
    assert first.parent == tmp_path / "run1" and shared.read_bytes() == first.read_bytes()
    assert [json.loads(line) for line in first.read_text().splitlines()] == sample_texts(expert, spec)

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded again")

    monkeypatch.setattr(generate, "sample_texts", no_model)
    second = ensure_generated("x0", expert, spec, tmp_path / "run2", progress=False)
    assert second.parent == tmp_path / "run2" and second.read_bytes() == first.read_bytes()  # the run's own copy
    with pytest.raises(AssertionError, match="loaded again"):  # other settings: other text, drawn anew
        ensure_generated("x0", expert, spec.model_copy(update={"seed": 1}), tmp_path / "run2", progress=False)


def test_a_cache_that_cannot_be_written_costs_only_the_reuse(lm_family, tmp_path, monkeypatch):  # noqa: F811
    (tmp_path / "cache").write_text("a file where the cache folder would be")
    monkeypatch.setenv("WILDMERGE_DATA_CACHE", str(tmp_path / "cache"))
    path = ensure_generated("x0", lm_family["experts"][0], GenerateSpec(**SMALL), tmp_path / "run", progress=False)
    assert len(path.read_text().splitlines()) == 6


def test_bad_generate_settings_fail_before_merging(lm_family, tmp_path, capsys):  # noqa: F811
    pool = _pool(tmp_path, lm_family, {"generate": {"max_new_token": 8}})
    assert main(["sample", "--base", pool, "--out", str(tmp_path / "run"), "--methods", "com", "--no-evaluate"]) == 2
    assert "max_new_token" in capsys.readouterr().err
