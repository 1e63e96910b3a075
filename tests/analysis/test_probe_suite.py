"""The shipped `probe` suite: real lm-eval 0.4.13 tasks that the fresh-head probe can use on any pool (train /
validation / test splits and one constant label set), checked against the task YAMLs lm-eval ships."""

from pathlib import Path

import yaml

from wildmerge.eval.suites import load_suite


class _Loader(yaml.SafeLoader):
    """lm-eval's YAMLs carry ``!function`` tags; their values do not matter here."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _task_configs(names) -> dict:
    import lm_eval

    out = {}
    for path in (Path(lm_eval.__file__).parent / "tasks").rglob("*.yaml"):
        text = path.read_text(errors="replace")
        if not any(f"task: {n}" in text for n in names):
            continue
        try:
            cfg = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError:
            continue
        if isinstance(cfg, dict) and isinstance(cfg.get("task"), str):
            out[cfg["task"]] = (path, cfg)
    return out


def test_probe_suite_tasks_have_three_splits_and_fixed_labels():
    suite = load_suite("probe")
    configs = _task_configs([t.task for t in suite.tasks])
    for t in suite.tasks:
        assert t.task in configs, f"{t.task} is not a task lm-eval ships"
        path, cfg = configs[t.task]
        if "include" in cfg:  # a variant: its template holds the shared keys
            base = yaml.load((path.parent / cfg["include"]).read_text(), Loader=_Loader)
            cfg = {**base, **cfg}
        assert all(cfg.get(k) for k in ("training_split", "validation_split", "test_split")), t.task
        assert cfg["output_type"] == "multiple_choice", t.task
        choices = cfg["doc_to_choice"]
        assert isinstance(choices, list) and len(choices) >= 2, f"{t.task}: label set is not one constant list"
