"""Live screening (``--screen``) on the quick demo family through the real lm-eval: a screened run ends with the
same Table 1 signs as a full run where the decision is clear, the models it finishes get exactly the full run's
scores, and a screened run killed in its second stage and restarted ends with the uninterrupted run's results."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers import write_plan
from wildmerge.analysis.report.leaderboard import interference_table, references
from wildmerge.analysis.report.scores import collect_scores, protocol_rows
from wildmerge.families.demo.family import ensure_family
from wildmerge.errors import ConfigError
from wildmerge.eval.evaluate import evaluate_run
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.store import ResultStore
from wildmerge.run import PlanEntry

FRACTION = 0.25


def _format_task(folder: Path, family) -> Path:
    """A task the trained demo models find easy and a broken model cannot: after an addition prompt, its sum or
    as many letters (equal lengths, so a random model is at chance). 120 documents: the screening subset has 30."""
    rng = np.random.default_rng(0)
    docs = []
    for i in range(120):
        a, b = (int(x) for x in rng.integers(0, 20, 2))
        right = str(a + b)
        wrong = "".join(rng.choice(list("abcdefghijklmnop"), len(right)))
        choices = [right, wrong] if i % 2 else [wrong, right]
        docs.append({"prompt": f"Q: {a}+{b}=\nA:", "choices": choices, "gold": choices.index(right)})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "format.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "demo_format.yaml").write_text(yaml.safe_dump({
        "task": "demo_format", "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(folder / "format.jsonl")}}, "test_split": "test",
        "output_type": "multiple_choice", "doc_to_text": "{{prompt}}", "doc_to_choice": "{{choices}}",
        "doc_to_target": "gold", "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}))
    suite = folder / "screen_suite.yml"
    suite.write_text(yaml.safe_dump({
        "name": "screen", "include_path": str(folder),
        "tasks": [{"task": "demo_format", "num_fewshot": 0, "label": "format"},
                  {"task": "demo_facts", "num_fewshot": 0, "label": "facts"}],
        "settings": {"dtype": "float32", "batch_size": 32, "device": "cpu", "include_defaults": False}}))
    # the quick family's own facts task, next to ours (two tasks: the stratified subset spans both)
    (folder / "demo_facts.yaml").write_text(Path(family["tasks"], "demo_facts.yaml").read_text())
    return suite


def _broken(src: str, dst: Path, seed: int) -> str:
    """A checkpoint with the base's files and random weights (of each tensor's scale): clearly worse than the base
    on any task."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = load_file(str(dst / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    save_file({k: v.float().std().nan_to_num(0.0).clamp(min=0.02) * torch.randn(v.shape, generator=gen)
               for k, v in weights.items()}, str(dst / "model.safetensors"))
    return str(dst)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("screened")
    family = ensure_family(root / "cache", seed=0, quick=True, progress=False)
    suite = _format_task(root / "tasks", family)
    experts = dict(list(family["experts"].items())[:2])  # two of the three: fewer jobs, the same logic
    entries = [PlanEntry(model_id="base", kind="base", path=family["base"])]
    entries += [PlanEntry(model_id=name, kind="expert", path=path, n=1, experts=[name])
                for name, path in experts.items()]
    # merges: a broken one (decided on the subset) and a copy of the base (a tie: never decided; its config
    # differs by one unused key, so it is its own job rather than the base's)
    tie = root / "tie"
    import shutil

    shutil.copytree(family["base"], tie)
    config = json.loads((tie / "config.json").read_text())
    (tie / "config.json").write_text(json.dumps({**config, "wildmerge_test_copy": True}))
    entries.append(PlanEntry(model_id="ta__n2", kind="merge", method="ta", n=2, subset_id="s0",
                             experts=list(experts), path=_broken(family["base"], root / "broken", 0)))
    entries.append(PlanEntry(model_id="ties__n2", kind="merge", method="ties", n=2, subset_id="s0",
                             experts=list(experts)[:2], path=str(tie)))
    plan_entries = [e.model_dump() for e in entries]
    runs = {}
    for name in ("full", "screened", "killed"):
        runs[name] = write_plan(root / name, [PlanEntry(**e) for e in plan_entries])
    full = evaluate_run(runs["full"], suite, EvalOptions(workers=1))
    screened = evaluate_run(runs["screened"], suite, EvalOptions(workers=1, screen=FRACTION))
    return {"root": root, "suite": suite, "runs": runs, "full": full, "screened": screened}


def _table(run_dir):
    df, _, _ = collect_scores(run_dir)
    protocol = protocol_rows(df)
    base, _, best = references(protocol)
    return (df, interference_table(protocol, base, "base", paired="vs_base_diff"),
            interference_table(protocol, best, "best", paired="vs_best_diff"))


def test_screened_run_keeps_every_table_1_sign_and_saves_items(study):
    assert not study["full"]["failed"] and not study["screened"]["failed"]
    df_full, t1_full, t2_full = _table(study["runs"]["full"])
    df_scr, t1_scr, t2_scr = _table(study["runs"]["screened"])
    for full, scr in ((t1_full, t1_scr), (t2_full, t2_scr)):
        assert list(zip(full["method"], full["n"])) == list(zip(scr["method"], scr["n"]))
        assert (np.sign(full["mean_diff_pp"]) == np.sign(scr["mean_diff_pp"])).all()
        assert (full["pct_beat"] == scr["pct_beat"]).all()
    by = {r["model_id"]: r for _, r in df_scr.iterrows()}
    assert by["ta__n2"]["screened"]  # clearly worse: stopped on the subset
    assert not by["ties__n2"]["screened"]  # the base's copy: an interval of exactly zero, never decided
    assert by["ta__n2"]["vs_base_high"] < 0 and by["ta__n2"]["vs_best_high"] < 0
    full = {r["model_id"]: r for _, r in df_full.iterrows()}
    for model_id in ("base", "ties__n2", *[m for m in by if m.startswith("expert")]):  # finished: the full scores
        assert by[model_id]["mean"] == full[model_id]["mean"]
        assert by[model_id]["format"] == full[model_id]["format"]
    assert study["screened"]["ran"] == 3 * 2 + 2 + 1  # references: both parts; merges: subset; the tie: its rest
    summary = study["screened"]["screening"]
    assert summary["stopped"] == 1 and summary["total"] == 2 * (120 + 16)
    assert summary["spent"] == (30 + 4) + (120 + 16)  # ceil(0.25 n) items per task for the stopped one
    assert t1_scr["screened"].tolist() == [0, 1, 0, 0]  # (TA, n=1), (TA, n=2), (TIES, n=1), (TIES, n=2)


def test_killed_screened_run_resumes_to_the_same_results(study):
    run, suite = study["runs"]["killed"], study["suite"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "wildmerge.cli", "eval", str(run), "--suite", str(suite), "--screen",
           str(FRACTION), "--workers", "1", "--no-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    killed = False
    for line in proc.stdout:
        if line.startswith("remaining items of undecided models"):  # the second stage is starting
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
    proc.wait()
    assert killed, "the screened run never reached its second stage"
    store = ResultStore(Path(run) / "eval" / "screen")
    index = store.index().models
    assert store.load(index["ties__n2"])["status"] == "missing"  # killed before its final record
    again = evaluate_run(run, suite, EvalOptions(workers=1, screen=FRACTION))
    assert not again["failed"] and again["ran"] <= 1  # the finished first stage is not run again
    reference = ResultStore(Path(study["runs"]["screened"]) / "eval" / "screen")
    for model_id, job_id in again["index"].items():
        got, want = store.load(job_id), reference.load(study["screened"]["index"][model_id])
        assert got["scores"] == want["scores"] and got["screening"] == want["screening"], model_id


def test_screen_fraction_and_ad_hoc_models_are_refused(study, tmp_path):
    with pytest.raises(ConfigError, match="--screen: expected a number strictly between 0 and 1, got 1.5"):
        EvalOptions(screen=1.5)
    from wildmerge.eval.evaluate import evaluate_models

    with pytest.raises(ConfigError, match="needs a run"):
        evaluate_models(["x"], study["suite"], tmp_path, EvalOptions(screen=0.2))
