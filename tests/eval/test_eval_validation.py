"""Validation splits (``eval/splits.py``): a suite task also scored on a held-out split, as its own score column,
through real lm-eval on a tiny local task; bad splits fail before any model loads; other suites keep their job ids.
"""

import json

import pytest
import yaml

from helpers import MC_DOCS, lm_family, write_tasks  # noqa: F401  (fixture)
from wildmerge.errors import ConfigError
from wildmerge.eval.evaluate import check_screen, evaluate_models
from wildmerge.eval.jobs import job_id, job_identity
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.suites import check_tasks, load_suite, suite_from_dict

VAL_DOCS = [  # held out: neither test items nor anything else
    {"question": "Snow is", "choices": ["white", "black", "loud"], "answer": 0},
    {"question": "One plus one is", "choices": ["three", "two", "nine"], "answer": 1},
    {"question": "The sun is", "choices": ["cold", "dark", "bright"], "answer": 2},
    {"question": "Water is", "choices": ["wet", "dry", "loud"], "answer": 0},
]
SETTINGS = {"dtype": "float32", "batch_size": 4, "device": "cpu", "include_defaults": False}


@pytest.fixture(scope="module")
def val_tasks(tmp_path_factory):
    """mini_mc with a test and a validation split, mini_mc_v (its validation items as a test split, the reference)
    and a group over mini_mc."""
    folder = write_tasks(tmp_path_factory.mktemp("val_tasks"))
    val_file = folder / "mini_mc_val.jsonl"
    val_file.write_text("".join(json.dumps(d) + "\n" for d in VAL_DOCS))
    mc = yaml.safe_load((folder / "mini_mc.yaml").read_text())
    mc["dataset_kwargs"]["data_files"]["validation"] = str(val_file)
    (folder / "mini_mc.yaml").write_text(yaml.safe_dump(mc))
    reference = {**mc, "task": "mini_mc_v", "dataset_kwargs": {"data_files": {"test": str(val_file)}}}
    (folder / "mini_mc_v.yaml").write_text(yaml.safe_dump(reference))
    (folder / "mini_group.yaml").write_text(yaml.safe_dump({"group": "mini_group", "task": ["mini_mc"]}))
    return folder


def _suite(tmp_path, tasks_dir, **task):
    data = {"name": "mini_val", "include_path": str(tasks_dir), "settings": SETTINGS,
            "tasks": [{"task": "mini_mc", "num_fewshot": 0, "label": "mc", **task}]}
    path = tmp_path / "mini_val.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_validation_split_is_scored_as_its_own_column(lm_family, val_tasks, tmp_path):  # noqa: F811
    import lm_eval
    from lm_eval.tasks import TaskManager

    suite = _suite(tmp_path, val_tasks, validation_split="validation")
    summary = evaluate_models([lm_family["base"]], suite, tmp_path / "out", EvalOptions(executor="serial"))
    assert not summary["failed"]
    record = json.loads((summary["store"] / "results" / f"{summary['index'][lm_family['base']]}.json").read_text())
    assert set(record["scores"]) == {"mc", "mc@validation"}
    n = record["lm_eval"]["mini_mc"]["n-samples"]
    assert n["mini_mc"]["effective"] == len(MC_DOCS) and n["mini_mc@validation"]["effective"] == len(VAL_DOCS)
    tm = TaskManager(include_path=str(val_tasks), include_defaults=False)
    bare = lm_eval.simple_evaluate(model="hf", model_args={"pretrained": lm_family["base"], "dtype": "float32"},
                                   device="cpu", tasks=["mini_mc", "mini_mc_v"], task_manager=tm, num_fewshot=0,
                                   batch_size=4, bootstrap_iters=0, log_samples=False)["results"]
    assert record["scores"]["mc"] == pytest.approx(bare["mini_mc"]["acc,none"])
    assert record["scores"]["mc@validation"] == pytest.approx(bare["mini_mc_v"]["acc,none"])


def test_a_validation_split_has_its_own_job_id_and_other_suites_keep_theirs(val_tasks, tmp_path):
    plain = suite_from_dict({"name": "mini", "tasks": [
        {"task": "mini_mc", "num_fewshot": 0, "label": "mc"},
        {"task": "mini_gen", "num_fewshot": 2, "metric": "exact_match,strict", "label": "gen"}], "settings": SETTINGS})
    assert job_id(plain, job_identity("sha256:abc", plain)) == "mini-0161e34d9cd2ce11"  # the id before this feature
    assert "validation_split" not in plain.model_dump()["tasks"][0]  # stored suites and job files unchanged
    with_val = load_suite(_suite(tmp_path, val_tasks, validation_split="validation"))
    (tmp_path / "plain").mkdir()
    without = load_suite(_suite(tmp_path / "plain", val_tasks))
    assert job_id(with_val, job_identity("sha256:abc", with_val)) != job_id(without, job_identity("sha256:abc",
                                                                                                  without))


def test_an_unknown_validation_split_fails_early_naming_the_task_and_its_splits(lm_family, val_tasks,  # noqa: F811
                                                                                 tmp_path):
    suite = _suite(tmp_path, val_tasks, validation_split="valid")
    with pytest.raises(ConfigError, match=r"task 'mini_mc': validation_split 'valid' is not in the task's data "
                                          r"\(splits: test, validation\)"):
        check_tasks(load_suite(suite))
    with pytest.raises(ConfigError, match="splits: test, validation"):  # before any model is loaded
        evaluate_models([lm_family["base"]], suite, tmp_path / "out")
    assert not (tmp_path / "out" / "mini_val" / "results").exists()


def test_the_test_split_a_group_and_screening_are_refused(val_tasks, tmp_path):
    with pytest.raises(ConfigError, match=r"is the split lm-eval scores the task on \(its test split\)"):
        check_tasks(load_suite(_suite(tmp_path, val_tasks, validation_split="test")))
    group = load_suite(_suite(tmp_path, val_tasks, validation_split="validation")).model_copy()
    group.tasks[0] = group.tasks[0].model_copy(update={"task": "mini_group"})
    with pytest.raises(ConfigError, match="'mini_group' names a validation_split, but it is a group"):
        check_tasks(group)
    with pytest.raises(ConfigError, match="--screen scores test items only"):
        check_screen(0.2, load_suite(_suite(tmp_path, val_tasks, validation_split="validation")))


def test_a_label_with_the_separator_is_refused():
    with pytest.raises(ConfigError, match="contains '@'"):
        suite_from_dict({"name": "x", "tasks": [{"task": "mini_mc", "num_fewshot": 0, "label": "a@b"}]})


def test_the_shipped_paper_and_probe_suites_name_every_held_out_split_lm_eval_has():
    """paper16_val and probe_val: a task names a validation_split exactly where lm-eval 0.4.13's YAML has a held-out
    split besides the one it scores (never the few-shot source of a few-shot task), and that split; the suites pass
    the check. They are paper16 and probe, task for task and setting for setting, whose job ids stay as they were. A
    task scored on its validation split (no test split) has none to give, and naming it is refused."""
    from lm_eval.tasks import TaskManager

    from wildmerge.eval.splits import check_validation_splits, scored_split, task_config

    tm = TaskManager()
    for name in ("paper16_val", "probe_val"):
        suite, plain = load_suite(name), load_suite(name[:-4])
        assert suite.settings == plain.settings and not any(t.validation_split for t in plain.tasks)
        assert [t.model_copy(update={"validation_split": None}) for t in suite.tasks] == plain.tasks
        check_validation_splits(suite, tm)
        for t in suite.tasks:
            try:
                config = task_config(tm, t.task, name)
            except ConfigError:  # a group or a tag: no one split to name
                assert t.validation_split is None
                continue
            held = config.get("validation_split")
            usable = held and held != scored_split(config) and not (
                t.num_fewshot and held == config.get("fewshot_split"))
            assert t.validation_split == (held if usable else None), (name, t.task)
    boolq = load_suite("paper16").model_copy()
    boolq.tasks = [t.model_copy(update={"validation_split": "validation"}) for t in boolq.tasks if t.task == "boolq"]
    with pytest.raises(ConfigError, match="as the task has none"):
        check_validation_splits(boolq, tm)
