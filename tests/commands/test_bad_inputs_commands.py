"""Bad inputs and a hostile environment through `wildmerge` commands: one line naming what and where, before heavy
work: adapters, disk full, read-only run folders, a bad dtype, circular advice, excluding every
expert, --screen without evaluation, a killed worker's message, a GPU merge of an uncached hub base."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from helpers import lm_family, one_error_line, write_pool  # noqa: F401 (fixture)
from wildmerge.cli import main


def _one_line(capsys) -> str:
    return one_error_line(capsys.readouterr().err)


def _recipe(tmp_path, base, experts, dtype="float32"):
    models = "".join(f"  - model: {p}\n    parameters: {{weight: 1.0}}\n" for p in experts)
    path = tmp_path / "recipe.yml"
    path.write_text(f"merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n{models}dtype: {dtype}\n")
    return str(path)


@pytest.fixture
def mount(tmp_path):
    """A tiny real filesystem (tmpfs) of its own; skipped where mounting is not allowed."""
    made = []

    def make(size="1m"):
        point = tmp_path / f"mnt{len(made)}"
        point.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                          capture_output=True).returncode:
            pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
        made.append(point)
        return point

    yield make
    for point in made:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _small_sample(pool, run, *extra):
    return main(["sample", "--base", pool, "--out", str(run), "--sizes", "2", "--k", "1", "--methods", "ta",
                 "--no-full", "--no-evaluate", *extra])


def test_excluding_every_expert_says_so(lm_family, tmp_path, capsys):  # noqa: F811
    pool = write_pool(tmp_path, lm_family)
    assert main(["sample", "--base", pool, "--out", str(tmp_path / "run"), "--exclude", "x0,x1"]) == 2
    line = _one_line(capsys)
    assert "no expert" in line and "between 1 and 0" not in line


def test_screen_without_evaluation_is_an_error(lm_family, tmp_path, capsys):  # noqa: F811
    pool = write_pool(tmp_path, lm_family)
    assert _small_sample(pool, tmp_path / "run", "--screen", "0.2") == 2
    assert "--screen" in _one_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_damaged_plan_gets_advice_that_is_not_the_failing_command(lm_family, tmp_path, capsys):  # noqa: F811
    pool = write_pool(tmp_path, lm_family)
    run = tmp_path / "run"
    assert _small_sample(pool, run) == 0
    (run / "plan.json").write_text("{not json")
    capsys.readouterr()
    assert _small_sample(pool, run) == 2
    line = _one_line(capsys)
    assert str(run / "plan.json") in line and "delete" in line and "rerun `wildmerge sample`" not in line
    (run / "plan.json").unlink()  # the advice, followed
    assert _small_sample(pool, run) == 0
    assert "0 new" in capsys.readouterr().out


def test_a_killed_worker_message_never_ends_with_an_empty_log(tmp_path):
    from wildmerge.eval.worker import lost_record

    job = {"job_id": "j", "model_path": "m", "fingerprint": "f", "suite": "s", "tasks": [], "settings": {},
           "result_path": str(tmp_path / "j.json"), "log_path": str(tmp_path / "absent.log")}
    record = lost_record(job, 0.0, "", killed=9)
    assert not record["error"].rstrip().endswith(":") and "no log lines were written" in record["error"]
    worker_log = tmp_path / "worker.log"
    worker_log.write_text("loading model\nRuntimeError: boom\n")
    record = lost_record(job, 0.0, "", killed=9, worker_log=worker_log)
    assert "RuntimeError: boom" in record["error"] and str(worker_log) in record["error"]


def test_an_adapter_folder_in_a_merge_recipe_points_to_pools(lm_family, tmp_path, capsys):  # noqa: F811
    adapter = tmp_path / "my_lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    assert main(["merge", _recipe(tmp_path, lm_family["base"], [lm_family["experts"][0], str(adapter)]),
                 str(tmp_path / "out")]) == 2
    line = _one_line(capsys)
    assert str(adapter) in line and "adapter" in line and "pool" in line and "no config.json" not in line


def test_an_unknown_dtype_is_one_line(lm_family, tmp_path, capsys):  # noqa: F811
    assert main(["merge", _recipe(tmp_path, lm_family["base"], lm_family["experts"], dtype="float33"),
                 str(tmp_path / "out")]) == 2
    line = _one_line(capsys)
    assert "float33" in line and "float32" in line


def test_an_adapter_that_does_not_fit_the_base_is_named(lm_family, tmp_path, capsys, monkeypatch):  # noqa: F811
    from peft import LoraConfig, get_peft_model

    from helpers import make_tiny_model

    monkeypatch.setenv("WILDMERGE_ADAPTER_CACHE", str(tmp_path / "cache"))
    other = make_tiny_model(tmp_path / "wide", hidden=48, vocab_size=300)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(other, dtype=torch.float32)
    adapter = tmp_path / "wide_lora"
    get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False)).save_pretrained(
        str(adapter))
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "lora", "base": {"model": lm_family["base"]},
                                    "experts": [{"model": lm_family["experts"][0], "name": "full"},
                                                {"model": str(adapter), "name": "lora"}]}))
    assert _small_sample(str(pool), tmp_path / "run") == 2
    line = _one_line(capsys)
    assert str(adapter) in line and "q_proj" in line and "shape" in line


def test_a_full_disk_names_the_path(lm_family, tmp_path, capsys, mount):  # noqa: F811
    small = mount("64k")
    assert main(["merge", _recipe(tmp_path, lm_family["base"], lm_family["experts"]), str(small / "out")]) == 2
    line = _one_line(capsys)
    assert str(small) in line and "no space left" in line.lower()


def test_a_read_only_run_folder_is_one_line_for_report_and_eval(lm_family, tmp_path, capsys, mount):  # noqa: F811
    from helpers import write_plan
    from wildmerge.run import PlanEntry

    space = mount("8m")
    run = write_plan(space / "run", [PlanEntry(model_id="base", kind="base", path=lm_family["base"])])
    assert main(["eval", str(run), "--suite", lm_family["suite"], "--limit", "1", "--executor", "serial"]) == 0
    capsys.readouterr()
    subprocess.run(["mount", "-o", "remount,ro", str(space)], check=True)
    for argv in (["report", str(run)], ["eval", str(run), "--suite", lm_family["suite"]],
                 ["sample", "--base", write_pool(tmp_path, lm_family), "--out", str(run), "--no-evaluate"]):
        assert main(argv) == 2, argv
        line = _one_line(capsys)
        assert str(space) in line and "read-only" in line.lower(), line


def test_a_gpu_merge_of_an_uncached_hub_base_is_one_line(lm_family, tmp_path, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    recipe = _recipe(tmp_path, "wildmerge-test/not-cached-model", lm_family["experts"])
    assert main(["merge", recipe, str(tmp_path / "out"), "--cuda"]) == 2
    assert "wildmerge-test/not-cached-model" in _one_line(capsys)
