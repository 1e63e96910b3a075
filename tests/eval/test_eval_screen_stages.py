"""The stage logic of a screened evaluation on fabricated part results (no model is scored): which jobs each stage
runs, who stops, what the final records say, that they are rewritten only when they change, and how parts split
and recombine documents (plain tasks, size-weighted groups, tags)."""

import math

import numpy as np
import pytest

from wildmerge.eval.screening.parts import REST, SCREEN, combine, limited, merge_parts, part_indices, leaves
from wildmerge.eval.screening.stats import screen_items
from wildmerge.eval.screening.stages import Screening
from wildmerge.eval.store import FAILED, OK, ResultStore, write_result
from wildmerge.eval.suites import suite_from_dict
from wildmerge.run import PlanEntry

SIZES = {"t_a": 40, "t_b": 24}
SUITE = suite_from_dict({"name": "mini", "tasks": [{"task": "t_a", "num_fewshot": 0, "label": "a"},
                                                   {"task": "t_b", "num_fewshot": 0, "label": "b"}]})


def test_parts_split_every_task_into_the_fixed_subset_and_the_rest():
    screen, rest = part_indices(SIZES, 0.25, 3, SCREEN), part_indices(SIZES, 0.25, 3, REST)
    for task, n in SIZES.items():
        assert screen[task] == sorted(screen[task]) and rest[task] == sorted(rest[task])
        assert sorted(screen[task] + rest[task]) == list(range(n))  # disjoint and complete
        assert screen[task] == screen_items(SIZES, 0.25, 3)[task].tolist() and len(screen[task]) == math.ceil(n / 4)
    assert limited(100, None) == 100 and limited(100, 30) == 30 and limited(100, 0.25) == 25 and limited(7, 50) == 7


def _docs(scores, ids, n):
    return {"n": n, "ids": list(ids), "scores": list(map(float, scores))}


def test_merge_and_combine_follow_lm_evals_aggregation():
    a = {"g": {"leaves": {"x": _docs([1, 0], [0, 2], 4), "y": _docs([1], [1], 2)}, "by_size": True}}
    b = {"g": {"leaves": {"x": _docs([1, 1], [1, 3], 4), "y": _docs([0], [0], 2)}, "by_size": True}}
    both = merge_parts(a, b)
    assert both["g"]["leaves"]["x"] == _docs([1, 1, 0, 1], [0, 1, 2, 3], 4)
    assert both["g"]["leaves"]["y"] == _docs([0, 1], [0, 1], 2)
    assert combine(both["g"]) == pytest.approx(4 / 6)  # a size-weighted group: the mean over all documents
    tag = {"leaves": both["g"]["leaves"], "by_size": False}
    assert combine(tag) == pytest.approx((3 / 4 + 1 / 2) / 2)  # a tag: the mean of its tasks
    loaded = {"tasks": {"x": 0, "y": 0, "z": 0}, "group_map": {"g": ["sub"], "sub": ["x", "y"]}}
    assert leaves(loaded, "g") == ["x", "y"] and leaves(loaded, "z") == ["z"]
    assert leaves({"tasks": {"x": 0, "y": 0}}, "a_tag") == ["x", "y"]


def _part(store, job, scores_by_label, part, status=OK):
    """A part's result as a worker would write it: per label one leaf with the part's documents."""
    idx = part_indices(SIZES, job["screen"]["fraction"], job["screen"]["seed"], part)
    documents = {label: {"leaves": {task: _docs(np.asarray(scores_by_label[label])[idx[task]], idx[task],
                                                SIZES[task])}, "by_size": False}
                 for label, task in (("a", "t_a"), ("b", "t_b"))}
    record = {"job_id": job["job_id"], "status": status, "fingerprint": job["fingerprint"], "suite": "mini",
              "settings": job["settings"], "model_path": job["model_path"], "tasks": job["tasks"], "seconds": 1.0,
              "finished": 1.0, "documents": documents, "error": None if status == OK else "boom"}
    write_result(job["result_path"], record)


@pytest.fixture
def screening(tmp_path):
    rng = np.random.default_rng(0)
    coin = lambda p: {"a": (rng.random(40) < p).astype(float), "b": (rng.random(24) < p).astype(float)}  # noqa
    base = coin(0.5)
    truth = {"base": base, "e1": coin(0.6), "e2": coin(0.55),
             "good": {k: np.ones_like(v) for k, v in base.items()},  # beats everyone: decided
             "bad": {k: np.zeros_like(v) for k, v in base.items()},  # loses to everyone: decided
             "tie": base}  # the base's own answers under another fingerprint: never decided
    kinds = {"base": "base", "e1": "expert", "e2": "expert"}
    models = {m: (PlanEntry(model_id=m, kind=kinds.get(m, "merge"), path=f"/nowhere/{m}"), f"fp-{m}") for m in truth}
    s = Screening(models, SUITE, None, False, ResultStore(tmp_path).prepare(), fraction=0.25, seed=0)
    return s, truth


def _run(s, truth, jobs, fail=()):
    for job in jobs:
        model = job["models"][0]
        _part(s.store, job, truth[model], job["screen"]["part"], FAILED if model in fail else OK)


def test_stages_score_references_in_full_and_stop_only_decided_models(screening):
    s, truth = screening
    first = s.first_stage()
    assert sorted((j["models"][0], j["screen"]["part"]) for j in first) == sorted(
        [(m, SCREEN) for m in truth] + [(m, REST) for m in ("base", "e1", "e2")])
    assert len({j["job_id"] for j in first}) == len(first)  # every part its own job
    _run(s, truth, first)
    refs = s.references()
    assert refs[1] == "e1"  # the best expert by its full score
    verdicts = {fp: s.verdict(fp, refs) for fp, kind in s.kinds.items() if kind == "candidate"}
    assert verdicts["fp-good"]["stopped"] and verdicts["fp-bad"]["stopped"]
    assert not verdicts["fp-tie"]["stopped"] and verdicts["fp-tie"]["vs_base"] == [0.0, 0.0, 0.0]
    assert verdicts["fp-good"]["vs_base"][1] > 0 and verdicts["fp-bad"]["vs_best"][2] < 0
    second = s.second_stage(verdicts)
    assert [(j["models"][0], j["screen"]["part"]) for j in second] == [("tie", REST)]
    _run(s, truth, second)
    cost = s.write_finals(verdicts)
    assert cost == {"spent": 2 * (10 + 6) + 64, "total": 3 * 64}
    final = {m: s.store.load(s.final_id(fp)) for m, (_, fp) in s.models.items()}
    assert final["good"]["screening"]["stage"] == "screened" and final["good"]["scores"] == {"a": 1.0, "b": 1.0}
    assert "items" not in final["good"]
    for m in ("base", "e1", "tie"):  # finished: every document, scores equal to the truth's means
        assert final[m]["screening"]["stage"] == "full"
        assert final[m]["scores"] == pytest.approx({k: v.mean() for k, v in truth[m].items()})
        assert final[m]["items"] == {k: v.tolist() for k, v in truth[m].items()}
    mtime = s.store.result_path(s.final_id("fp-good")).stat().st_mtime_ns
    s.write_finals(verdicts)  # nothing changed: nothing rewritten
    assert s.store.result_path(s.final_id("fp-good")).stat().st_mtime_ns == mtime


def test_a_failed_part_fails_the_model_and_missing_references_decide_nothing(screening):
    s, truth = screening
    _run(s, truth, s.first_stage(), fail=("base",))
    refs = s.references()
    assert refs[0] is None
    verdicts = {fp: s.verdict(fp, refs) for fp, kind in s.kinds.items() if kind == "candidate"}
    assert all(v is None for v in verdicts.values())
    assert len(s.second_stage(verdicts)) == 3  # nothing decided: every candidate needs its rest
    record = s.final_record("fp-base", None)
    assert record["status"] == FAILED and record["error"].startswith("screening subset: boom")
