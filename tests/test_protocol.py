"""The protocol's settings: the command's arguments become one typed model, and its draw is, key for key, the
manifest's ``sampling`` record of runs written before the model existed (so they resume and compare equal)."""

import argparse
import json
from pathlib import Path

import pytest

from helpers import write_pool
from wildmerge.commands import sample
from wildmerge.errors import ConfigError
from wildmerge.protocol import PAPER_K, PAPER_SIZES, SampleSettings, run_sample
from wildmerge.pools import load_pool
from wildmerge.planning.settings import Sampling

V0 = Path(__file__).parent / "fixtures" / "run_v0" / "manifest.json"


def _settings(*argv) -> SampleSettings:
    parser = argparse.ArgumentParser()
    sample.configure(parser)
    return sample.settings(parser.parse_args(list(argv)))


def _legacy_record(pool, seed, sizes, k, full, homogeneous, select=None) -> dict:
    """What ``wildmerge sample`` wrote under ``sampling`` before the typed model (copied from that code)."""
    out = {"pool": pool.name, "seed": seed, "sizes": sorted(set(sizes)), "k": k, "full": full,
           "mode": "homogeneous" if homogeneous else "random",
           "expert_refs": [[e.label, e.model, e.revision] for e in pool.experts],
           "base_ref": [pool.base.model, pool.base.revision]}
    if select:
        out.update(mode="predicted", select=select)
    return out


@pytest.fixture
def pool(tmp_path):
    family = {"base": "org/base", "experts": ["org/a", "org/b", "org/c"]}
    return load_pool(write_pool(tmp_path, family, domains=["math", "math", "code"]))


@pytest.mark.parametrize("kwargs", [
    dict(seed=7, sizes=[2, 1, 2], k=3, full=True, homogeneous=False),
    dict(seed=0, sizes=[1], k=1, full=False, homogeneous=True),
    dict(seed=1, sizes=[1, 2], k=4, full=True, homogeneous=False, select={"predictor": "/p.json", "sha256": "0f"}),
])
def test_the_draw_is_the_manifest_record_of_before(pool, kwargs):
    record = Sampling.of(pool, **kwargs).record()
    assert json.dumps(record) == json.dumps(_legacy_record(pool, **kwargs))  # same keys, same order, same values
    assert Sampling.model_validate(json.loads(json.dumps(record))).record() == record


def test_a_version_0_record_round_trips():
    recorded = json.loads(V0.read_text())["sampling"]
    sampling = Sampling.model_validate(recorded)
    assert sampling.record() == recorded and sampling.differences(recorded) == []
    changed = sampling.model_copy(update={"k": 2})
    assert changed.differences(recorded) == ["k: run has 1, this command asks for 2"]


def test_arguments_become_settings_with_the_defaults_of_the_pool(pool):
    s = _settings("--base", "x.yml", "--sizes", "2", "--exclude", "a,b", "--exclude", "c", "--ablation",
                  "ta_lambda,sb_beta", "--no-download", "--eval-device", "cuda", "--limit", "3")
    assert s.pool == "x.yml" and s.sizes == [2] and s.exclude == ["a", "b", "c"]
    assert s.ablations == ["ta_lambda", "sb_beta"] and s.download is False and s.evaluate is None
    # --merge-device (merging) and --eval-device (evaluation) are two settings
    assert s.merge_device == "cpu" and s.evaluation.suite_overrides() == {"device": "cuda", "limit": 3}
    json.dumps(s.model_dump(mode="json"))  # the settings are plain data: the predictor's scorer travels apart
    paper = _settings().sampling(pool)
    assert paper.sizes == [n for n in PAPER_SIZES if n < 3] and paper.k == PAPER_K
    own = pool.model_copy(update={"protocol": pool.protocol.model_copy(update={"sizes": [1, 2, 4], "k": 2})})
    assert _settings().sampling(own).sizes == [1, 2] and _settings().sampling(own).k == 2
    assert _settings("--k", "5", "--sizes", "1").sampling(own).k == 5  # a flag beats the pool's default
    # the embedded families carry their own defaults in their pool files: the protocol in minutes on a CPU
    demo, smol = load_pool("demo").protocol, load_pool("smollm2").protocol
    assert (demo.sizes, demo.k, demo.evaluate, demo.suite) == ([1, 2, 4], 2, True, "demo")
    assert smol.evaluate and smol.suite == "smollm2_bf16" and {"regmean", "com"} <= set(smol.methods)
    assert _settings("--homogeneous").sampling(pool).mode == "homogeneous"


@pytest.mark.parametrize("argv,message", [
    (["--select", "predicted"], "--select predicted needs --predictor"),
    (["--methods", ","], "--methods is empty"),
    (["--sizes", "4"], "pool 'tiny' has 3 experts"),
])
def test_bad_settings_fail_before_anything_is_resolved(pool, tmp_path, argv, message):
    s = _settings("--base", pool.source, "--out", str(tmp_path / "run"), "--no-evaluate", *argv)
    with pytest.raises(ConfigError, match=message):
        run_sample(s)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("field,value,message", [
    ("k", 0, "--k: expected a whole number >= 1, got 0"),
    ("tune_samples", 0, "--tune-samples: expected a whole number >= 1, got 0"),
])
def test_a_library_caller_gets_the_command_lines_words(pool, tmp_path, field, value, message):
    """The command line refuses these when it parses them (tests/commands/test_bad_inputs_table.py); a library caller's
    SampleSettings get the same message from the same rule."""
    s = _settings("--base", pool.source, "--out", str(tmp_path / "run"), "--no-evaluate")
    with pytest.raises(ConfigError, match=f"^{message}$"):
        run_sample(s.model_copy(update={field: value}))
    assert not (tmp_path / "run").exists()
