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


def test_without_a_joint_reference_the_j_r_u_cells_say_why():
    from wildmerge.analysis.probe.probe_models import ProbeModel, row_for, to_markdown

    row = row_for(ProbeModel("m", "/x"), "task", {"native": 0.5, "fh": [0.6, 0.7], "matched": True, "epoch": [1, 2]},
                  None, [0, 1])
    table = to_markdown([row], [0, 1])
    line = next(l for l in table.splitlines() if l.startswith("| m "))
    assert line.count("no joint reference J: pass --reference") == 4  # J, R (per seed), R (ratio), U
    assert "0.500" in line and "0.650" in line  # N and FH are there
