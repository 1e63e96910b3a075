"""Pools as data: the shipped pools match the paper's appendices; bad pool files fail with a clear message;
hub ids resolve from huggingface_hub's cache (pinned to the commit hash) and offline misses say how to fetch."""

import os
from pathlib import Path

import pytest

from wildmerge.errors import ConfigError, WildmergeError
from wildmerge import hub
from wildmerge.pools import list_pools, load_pool


def test_shipped_pools_load_in_paper_order():
    assert {"llama-3.2-3b", "llama-3.1-8b", "qwen3-4b", "qwen3-8b", "qwen3-4b-math", "qwen3-4b-medical",
            "qwen3-8b-math", "qwen3-8b-medical", "qwen3-4b-homogeneous", "qwen3-8b-homogeneous", "demo"} <= set(list_pools())
    for name in list_pools():
        assert load_pool(name).name == name
    expected = {  # Appendix A: (base, first, last) and 12 experts each
        "llama-3.2-3b": ("meta-llama/Llama-3.2-3B-Instruct", "MergeBench/Llama-3.2-3B-Instruct_instruction",
                         "huihui-ai/Llama-3.2-3B-Instruct-abliterated"),
        "llama-3.1-8b": ("meta-llama/Llama-3.1-8B-Instruct", "mims-harvard/TxAgent-T1-Llama-3.1-8B",
                         "tokyotech-llm/Llama-3.1-Swallow-8B-v0.5"),
        "qwen3-4b": ("Qwen/Qwen3-4B", "mlxha/Qwen3-4B-grpo-medmcqa", "prithivMLmods/Draconis-Qwen3_Math-4B-Preview"),
        "qwen3-8b": ("Qwen/Qwen3-8B", "Trendyol/Trendyol-LLM-8B-T1", "Vikhrmodels/QVikhr-3-8B-Instruction"),
    }
    for name, (base, first, last) in expected.items():
        pool = load_pool(name)
        assert pool.base.model == base and len(pool.experts) == 12
        assert pool.experts[0].model == first and pool.experts[-1].model == last
    assert load_pool("llama-3.1-8b").experts[9].model == "AIDX-kt ds/kt dsbaseLM-v0.13-onbased-llama3.1"
    homo = load_pool("qwen3-8b-homogeneous")
    assert [e.domain for e in homo.experts] == ["math"] * 3 + ["medical"] * 3
    assert [e.model for e in load_pool("qwen3-4b-math").experts] == [e.model for e in load_pool(
        "qwen3-4b-homogeneous").experts[:3]]
    demo = load_pool("demo")
    assert demo.base.model == "demo:base" and demo.expert_names == [f"expert_{i:02d}" for i in range(1, 13)]


def test_garbled_id_is_reported_unresolvable():
    pool = load_pool("llama-3.1-8b")
    bad = pool.experts[9]
    with pytest.raises(hub.Unresolvable, match="neither an existing local folder nor a valid hub id"):
        hub.resolve(bad.model)
    with pytest.raises(WildmergeError, match="(?s)kt-dsbaseLM.*--exclude"):
        hub.resolve_all([(bad.label, bad.model, None)])


def _write(tmp_path, text, name="p.yml"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("text,match", [
    ("base: {model: a/b}\nexperts: [{model: c/d}, {model: c/d}]\n", "duplicate expert"),
    ("base: {model: a/b}\nexperts: [{model: a/b}]\n", "is the base model itself"),
    ("base: {model: a/b}\nexperts: [{model: c/d, domian: math}]\n", "unknown key.*did you mean 'domain'.*valid keys"),
    ("base: {model: a/b}\nexperts: []\n", "at least one expert"),
    ("base: {model: a/b}\nexpert: [{model: c/d}]\n", "unknown key"),
    ("base: {model: a/b}\nexperts: [{model: x/m, name: same}, {model: y/m, name: same}]\n", "share the name"),
    ("- just a list\n", "must be a mapping"),
])
def test_bad_pool_files(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_pool(_write(tmp_path, text))


def test_unknown_pool_name_suggests():
    with pytest.raises(ConfigError, match="did you mean 'qwen3-4b'"):
        load_pool("qwen3-4")
    with pytest.raises(ConfigError, match="does not exist"):
        load_pool("/nonexistent/pool.yml")


def test_exclude_and_unknown_expert(tmp_path):
    pool = load_pool(_write(tmp_path, "base: {model: a/b}\nexperts: [{model: c/d}, {model: c/e}]\n"))
    assert pool.name == "p" and pool.without(["d"]).expert_names == ["e"]
    with pytest.raises(ConfigError, match="no expert 'x'"):
        pool.without(["x"])


def test_local_paths_resolve_relative_to_the_pool_file(tmp_path):
    (tmp_path / "models" / "base").mkdir(parents=True)
    assert hub.classify("models/base", tmp_path) == ("local", str((tmp_path / "models" / "base").resolve()))
    with pytest.raises(hub.Unresolvable, match="local folder does not exist"):
        hub.classify("./models/missing", tmp_path)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """A real huggingface_hub cache layout with one cached repository, offline."""
    cache = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = cache / "models--org--cached" / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (cache / "models--org--cached" / "refs").mkdir()
    (cache / "models--org--cached" / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    return commit


def test_hub_cache_resolution_pins_commit(hf_cache):
    r = hub.resolve("org/cached")
    assert r.kind == "hub" and r.revision == hf_cache and Path(r.path).name == hf_cache
    assert hub.resolve("org/cached", revision=hf_cache).path == r.path  # a pinned rerun finds the same snapshot


def test_offline_missing_lists_models_and_fetch_command(hf_cache):
    with pytest.raises(WildmergeError) as info:
        hub.resolve_all([("base", "org/cached", None), ("x", "org/missing", None), ("y", "org/other", "v1.0")])
    msg = str(info.value)
    assert "2 model(s) cannot be resolved" in msg and "org/missing" in msg and "org/other" in msg
    assert "hf download org/missing --include" in msg and "hf download org/other --revision v1.0" in msg
    assert "'*.bin'" not in msg  # pickles are fetched only with --allow-pickle
    assert os.environ["HF_HUB_OFFLINE"] == "1"
