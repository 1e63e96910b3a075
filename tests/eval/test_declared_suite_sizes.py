"""The large and probe suites declare the items lm-eval scores per task on the full families of seed 0: recounted
here from the generators that write those tasks (no family built), and the SmolLM2 suites' tokens per item recounted
with the SmolLM2 tokenizer (the quick family's base carries the same one) as the suites say: prompt x choices +
choices, the mean rounded, a generation task as its multiple-choice twin."""

import json

import pytest

from wildmerge.eval.suites import load_suite
from wildmerge.families import probe_cache as P


def _demo_docs(tmp_path) -> dict:
    """{task: the docs lm-eval scores} of demo_large and demo_probe, on the full family of seed 0."""
    from wildmerge.families.demo import spec as S
    from wildmerge.families.demo.large import LARGE_ITEMS, PREFIX, large_items
    from wildmerge.families.demo.probe_data import probe_splits
    from wildmerge.families.demo.skills import SKILLS, make_world

    full = S.build_spec(False)
    world = make_world(0, full.n_entities)
    docs = {PREFIX + s: [i.as_doc() for i in large_items(s, LARGE_ITEMS, 0, world, full.eval_items)] for s in SKILLS}
    docs[PREFIX + "add_gen"] = docs[PREFIX + "add"]
    (tmp_path / "family.json").write_text(json.dumps({"quick": False, "seed": 0}))  # what probe_splits reads
    return docs | {t: splits["test"] for t, splits in probe_splits({"manifest": str(tmp_path / "family.json")}, 0).items()}


def _smollm2_docs() -> dict:
    """{task: the docs lm-eval scores} of smollm2_large and smollm2_probe, on the full family of seed 0."""
    from wildmerge.families.smollm2 import spec as S
    from wildmerge.families.smollm2.large import PREFIX, large_items
    from wildmerge.families.smollm2.probe import LABELS, PROBE_SKILLS
    from wildmerge.families.smollm2.skills import ANSWER_END, SKILLS, eval_items, make_kb
    from wildmerge.families.smollm2.tasks import GENERATION_TASKS, PREFIX as FAMILY

    full = S.build_spec(False)
    kb = make_kb(0, full.n_countries)
    docs = {PREFIX + s: [i.as_doc() for i in large_items(s, 0, kb)] for s in SKILLS}
    docs |= {PREFIX + name.removeprefix(FAMILY): docs[PREFIX + skill] for name, (skill, _) in GENERATION_TASKS.items()}
    tests = {s: {"train": [], "validation": [], "test": [i.as_doc() for i in eval_items(s, full.eval_items, 0, kb)]}
             for s in PROBE_SKILLS}  # the probe's test split: the family's own test items
    return docs | {t: splits["test"] for t, splits in P.probe_tasks("smollm2_probe_", tests, LABELS, ANSWER_END).items()}


def _declared(*suites) -> dict:
    return {t.task: t.size for name in suites for t in load_suite(name).tasks}


def test_the_demo_suites_declare_the_items_their_generators_write(tmp_path):
    declared = _declared("demo_large", "demo_probe")
    assert {t: len(d) for t, d in _demo_docs(tmp_path).items()} == {t: items for t, (items, _) in declared.items()}


def test_the_smollm2_suites_declare_their_items_and_tokens():
    from wildmerge.families.smollm2.source import missing

    declared = _declared("smollm2_large", "smollm2_probe")
    assert _declared("smollm2_large_bf16") == _declared("smollm2_large")
    docs = _smollm2_docs()
    assert {t: len(d) for t, d in docs.items()} == {t: items for t, (items, _) in declared.items()}
    if missing():
        pytest.skip(missing())
    from transformers import AutoTokenizer

    from wildmerge.families.smollm2.family import ensure_family

    tokenizer = AutoTokenizer.from_pretrained(ensure_family(quick=True, progress=False)["base"])

    def length(text):
        return len(tokenizer(text)["input_ids"])

    def per_item(task):  # float64 sums, then the mean rounded half up
        total = sum(length(d["prompt"]) * len(d["choices"]) + sum(length(c) for c in d["choices"]) for d in docs[task])
        return int(total / len(docs[task]) + 0.5)

    assert {t: per_item(t) for t in docs} == {t: tokens for t, (_, tokens) in declared.items()}


@pytest.mark.parametrize("suite", ["demo_large", "smollm2_large", "smollm2_probe"])
def test_the_plan_prices_the_declared_items_and_a_limit_caps_them(suite):
    """What the dry run's cost plan scores per model (``protocol._scoring``, ``--limit N``), from the declared sizes."""
    from wildmerge.eval.options import EvalOptions
    from wildmerge.planning import cost
    from wildmerge.protocol import _scoring

    declared = _declared(suite)
    for limit in (None, 50):
        scoring = _scoring(suite, EvalOptions(limit=limit))
        assert cost.suite_tokens(scoring.tasks, scoring.limit, scoring.sizes) == {
            t: (min(items, limit or items), min(items, limit or items) * tokens) for t, (items, tokens) in declared.items()}
