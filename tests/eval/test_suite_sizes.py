"""A suite task's size (``items``, ``tokens_per_item``): a planning fact, never part of a job's identity or of a
stored suite, given whole or not at all, and one size per task across the shipped suites."""

import pytest

from wildmerge.errors import ConfigError
from wildmerge.eval.jobs import make_job
from wildmerge.eval.suites import load_suite, suite_from_dict, task_sizes


def test_a_size_changes_no_job_id_and_is_not_stored():
    suite = load_suite("demo")
    assert all(t.size for t in suite.tasks)
    bare = suite.model_copy(update={"tasks": [t.model_copy(update={"items": None, "tokens_per_item": None})
                                              for t in suite.tasks]})
    sized, plain = make_job("/m", "fp", suite, None, False), make_job("/m", "fp", bare, None, False)
    assert sized.job_id == plain.job_id and sized.tasks == plain.tasks
    dumped = suite.model_dump(mode="json")["tasks"]
    assert not any("items" in t or "tokens_per_item" in t for t in dumped)


def test_a_size_is_given_whole():
    task = {"task": "t", "num_fewshot": 0, "items": 10}
    with pytest.raises(ConfigError, match="gives only one of items and tokens_per_item: give both"):
        suite_from_dict({"name": "s", "tasks": [task]})
    with pytest.raises(ConfigError, match="items"):
        suite_from_dict({"name": "s", "tasks": [{**task, "items": 0, "tokens_per_item": 5}]})
    assert suite_from_dict({"name": "s", "tasks": [{**task, "tokens_per_item": 5}]}).tasks[0].size == (10, 5)


def test_task_sizes_are_the_shipped_suites_with_the_read_suites_own_over_them(tmp_path):
    from wildmerge.named_files import list_names

    declared = {}
    for name in list_names("suites"):  # a task sized in two shipped suites has one size
        for t in load_suite(name).tasks:
            if t.size:
                assert declared.setdefault(t.task, t.size) == t.size, (name, t.task)
    assert task_sizes() == declared
    own = tmp_path / "own.yml"
    own.write_text("name: own\ntasks:\n  - {task: arc_easy, num_fewshot: 0, items: 5, tokens_per_item: 7}\n"
                   "  - {task: boolq, num_fewshot: 0}\n")
    sizes = task_sizes(str(own))
    assert sizes["arc_easy"] == (5, 7) and sizes["boolq"] == declared["boolq"] and "my_task" not in sizes
