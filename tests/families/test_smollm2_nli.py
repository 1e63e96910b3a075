"""The SmolLM2 LoRA NLI experts (Chain of Merges' LLM column): generated NLI items, their suite and their pool.

The generator's promises hold without a model: seeded (the same bytes twice), labels balanced, held-out items never
met in training. The quick variant (two adapters, two steps each) is built once into the default cache, like the
quick demo family the protocol tests use: its pool resolves with every expert's data, lm-eval's accuracy on a genre
matches a hand computation, and the protocol with Chain of Merges and TA runs end to end on it.
"""

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from wildmerge.errors import ConfigError
from wildmerge.families.smollm2 import nli_spec as N
from wildmerge.families.smollm2.nli import (GENRES, KEY_SLOT, LABELS, TEMPLATES, NliStream, balanced_items,
                                            eval_items, fillers, nli_item)
from wildmerge.families.smollm2.source import missing

needs_gguf = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def _write_everything(out: Path) -> dict:
    from wildmerge.families.items import write_items
    from wildmerge.families.smollm2.nli_build import write_expert_data

    write_items(out / "tasks", {N.expert_name(g): eval_items(g, 30, 0) for g in GENRES})
    for g in GENRES:
        write_expert_data(out, g, 0, 12, 9)
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.jsonl"))}


def test_the_generated_data_is_the_same_bytes_twice_and_seeds_change_it(tmp_path):
    first, second = _write_everything(tmp_path / "a"), _write_everything(tmp_path / "b")
    assert first == second and len(first) == 2 * len(GENRES) + len(GENRES)
    stream, again = NliStream("travel", 3), NliStream("travel", 3)
    assert [next(stream) for _ in range(20)] == [next(again) for _ in range(20)]
    assert eval_items("science", 30, 0) != eval_items("science", 30, 1)


def test_labels_are_balanced_in_held_out_items_data_and_training():
    for g in GENRES:
        for items in (eval_items(g, N.FULL.eval_items, 0), balanced_items(g, N.FULL.n_labelled, "0-labelled", "train")):
            counts = Counter(i.answer for i in items)
            assert set(counts) == set(LABELS) and max(counts.values()) - min(counts.values()) <= 1, (g, counts)
        stream = NliStream(g, 0)
        assert Counter(next(stream).answer for _ in range(300)) == dict.fromkeys(LABELS, 100)
        items = eval_items(g, N.FULL.eval_items, 0)
        assert len({i.prompt for i in items}) == len(items) == N.FULL.eval_items
        assert all(i.choices == LABELS and i.choices[i.gold] == i.answer for i in items)


def test_held_out_items_never_meet_training_items_and_genres_differ():
    for g in GENRES:
        train, test = fillers(g, "train")[KEY_SLOT[g]], fillers(g, "test")[KEY_SLOT[g]]
        assert not set(train) & set(test)
        assert all("{" + KEY_SLOT[g] + "}" in premise for premise, *_ in TEMPLATES[g])  # every premise names one
        held_out = {i.prompt for i in eval_items(g, N.FULL.eval_items, 0)}
        stream = NliStream(g, 0)
        seen = {next(stream).prompt for _ in range(3000)}
        data = {i.prompt for i in balanced_items(g, 200, "0-text", "train")}
        assert not held_out & seen and not held_out & data
        others = {p for h in GENRES if h != g for p, *_ in TEMPLATES[h]}
        assert not {p for p, *_ in TEMPLATES[g]} & others
    docs = eval_items("fiction", 3, 0)[0].as_doc()["choices"]  # no option is a prefix of another
    assert not any(a != b and b.startswith(a) for a in docs for b in docs)


def test_bad_input_gets_one_clear_error(monkeypatch):
    from wildmerge.families.smollm2.family import resolve_smollm2_ref
    import random

    with pytest.raises(ValueError, match="unknown NLI genre 'sports'; valid: fiction"):
        nli_item(random.Random(0), "sports", "neutral", "train")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        nli_item(random.Random(0), "travel", "neutral", "dev")
    monkeypatch.delenv("WILDMERGE_SMOLLM2_QUICK", raising=False)
    with pytest.raises(ConfigError, match="smollm2:nli_fictoin.*did you mean 'nli_fiction'.*smollm2:nli_base"):
        resolve_smollm2_ref("smollm2:nli_fictoin", build=False)
    with pytest.raises(ConfigError, match="smollm2:text/nli_sport.*valid: smollm2:text/nli_fiction"):
        resolve_smollm2_ref("smollm2:text/nli_sport", build=False)
    monkeypatch.setenv("WILDMERGE_SMOLLM2_QUICK", "1")
    with pytest.raises(ConfigError, match="quick NLI experts are nli_fiction, nli_travel: unset WILDMERGE_SMOLLM2_QUICK"):
        resolve_smollm2_ref("smollm2:nli_science", build=False)
    assert resolve_smollm2_ref("smollm2:labelled/nli_travel", build=False) is None


def test_the_shipped_pool_and_suite_name_every_expert_and_genre():
    from wildmerge.eval.suites import load_suite
    from wildmerge.hub import family_task_names
    from wildmerge.pools import load_pool

    pool = load_pool("smollm2_nli")
    assert [e.model for e in pool.experts] == [f"smollm2:{n}" for n in N.expert_names(False)]
    assert {e.label: pool.data_for(e).labelled.demo for e in pool.experts} == {
        n: f"smollm2:labelled/{n}" for n in N.expert_names(False)}
    assert pool.quick.experts == N.expert_names(True)
    suite = load_suite("smollm2_nli")
    assert [t.task for t in suite.tasks] == N.task_names() == family_task_names("smollm2:nli_tasks")
    assert {lab for e in pool.experts for lab in e.tasks} == {t.label for t in suite.tasks}


@pytest.fixture(scope="module")
def quick_nli(monkeypatch_module):
    if missing():
        pytest.skip(missing())
    monkeypatch_module.setenv("WILDMERGE_SMOLLM2_QUICK", "1")
    from wildmerge.families.smollm2.nli_family import ensure_nli

    return ensure_nli(quick=True, progress=False)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@needs_gguf
def test_the_quick_pool_resolves_with_folded_adapters_and_each_experts_data(quick_nli):
    from wildmerge.expert_data.read import expert_items, expert_texts
    from wildmerge.families.cache import sha256
    from wildmerge.pools import resolve

    manifest = json.loads(Path(quick_nli["manifest"]).read_text())
    assert all(sha256(Path(quick_nli["root"]) / rel) == digest for rel, digest in manifest["files"].items())
    pool = resolve("smollm2_nli")
    assert pool.expert_names == N.expert_names(True) and set(pool.adapters) == set(pool.expert_names)
    assert pool.base_path == quick_nli["base"]
    for name in pool.expert_names:
        items = expert_items(pool.data[name], name)
        assert len(items) == N.QUICK.n_labelled and len(expert_texts(pool.data[name], name)) == N.QUICK.n_text
        assert Counter(i["answer"] for i in items) == dict.fromkeys(LABELS, N.QUICK.n_labelled // 3)
        held_out = {json.loads(line)["prompt"] for line in
                    (Path(quick_nli["tasks"]) / f"{name}.jsonl").read_text().splitlines()}
        assert not held_out & {i["prompt"] for i in items}


def _hand_accuracy(model_path: str, docs: list) -> float:
    """Accuracy as a float64 computation: the summed log-probability of ``" " + choice`` after the prompt, argmax."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float64).eval()
    right = 0
    for doc in docs:
        context = tok(doc["prompt"], add_special_tokens=False)["input_ids"]
        scores = []
        for choice in doc["choices"]:
            whole = tok(doc["prompt"] + " " + choice, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logp = model(torch.tensor([whole])).logits[0].log_softmax(-1)
            scores.append(sum(float(logp[j - 1, whole[j]]) for j in range(len(context), len(whole))))
        right += max(range(len(scores)), key=scores.__getitem__) == doc["gold"]
    return right / len(docs)


@needs_gguf
def test_the_suite_scores_accuracy_as_a_hand_computation(quick_nli, tmp_path):
    import yaml

    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.store import ResultStore

    suite = yaml.safe_load((Path(__file__).parents[2] / "merge_recipes" / "suites" / "smollm2_nli.yml").read_text())
    suite["tasks"] = [t for t in suite["tasks"] if t["label"] == "government"]
    suite.pop("extends")
    suite["settings"] = {"dtype": "float32", "batch_size": 8, "limit": None, "include_defaults": False}
    (tmp_path / "one.yml").write_text(yaml.safe_dump(suite))
    expert = quick_nli["experts"]["nli_fiction"]
    from wildmerge.pools.adapters import materialise

    folded, _ = materialise(quick_nli["base"], expert, progress=False)
    summary = evaluate_models([str(folded)], tmp_path / "one.yml", tmp_path / "out")
    record = ResultStore(summary["store"]).load(summary["index"][str(folded)])
    docs = [json.loads(line) for line in (Path(quick_nli["tasks"]) / "nli_government.jsonl").read_text().splitlines()]
    assert not summary["failed"] and len(docs) == N.QUICK.eval_items
    assert math.isclose(record["scores"]["government"], _hand_accuracy(str(folded), docs))


@needs_gguf
def test_the_protocol_runs_com_and_ta_on_the_quick_nli_pool(quick_nli, tmp_path):
    from wildmerge.cli import main

    out = tmp_path / "run"
    assert main(["sample", "--pool", "smollm2_nli", "--methods", "com,ta", "--sizes", "1", "--limit", "3",
                 "--out", str(out)]) == 0
    import pandas as pd

    scores = pd.read_csv(next(out.rglob("scores.csv")))
    merges = scores[scores["kind"] == "merge"]
    assert set(merges["method"]) == {"com", "ta"} and (merges["status"] == "ok").all()
    assert set(merges["n"]) == {2} and {"fiction", "travel"} <= set(scores.columns)


@needs_gguf
def test_a_build_reuses_a_siblings_checked_base_and_refuses_one_made_otherwise(quick_nli, tmp_path):
    import shutil

    from wildmerge.families.cache import sha256
    from wildmerge.families.smollm2.nli_build import reused_base

    built = json.loads(Path(quick_nli["manifest"]).read_text())
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    shutil.copyfile(quick_nli["manifest"], sibling / "family.json")
    (sibling / "base").symlink_to(quick_nli["base"])
    other = {**built["kernels"], "aten": "SOMETHING_ELSE"}
    assert not reused_base(tmp_path / "new", built["source"], other) and not (tmp_path / "new").exists()
    assert reused_base(tmp_path / "new", built["source"], built["kernels"])
    assert {rel: sha256(tmp_path / "new" / rel) for rel in built["files"] if rel.startswith("base/")} == {
        rel: digest for rel, digest in built["files"].items() if rel.startswith("base/")}
