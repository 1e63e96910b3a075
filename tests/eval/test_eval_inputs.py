"""Bad input is caught at the door with a message that says what to fix; fingerprints follow content, not paths."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from helpers import lm_family, write_suite  # noqa: F401  (fixture)
from wildmerge.cli import main
from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.eval.evaluate import evaluate_models
from wildmerge.eval.fingerprint import FingerprintCache, fingerprint_model
from wildmerge.eval.suites import load_suite

TABLE6 = {"arc_easy": 0, "arc_challenge": 0, "boolq": 0, "commonsense_qa": 0, "hellaswag": 0, "winogrande": 0,
          "piqa": 0, "openbookqa": 0, "headqa": 0, "prost": 0, "truthfulqa_mc1": 0, "medmcqa": 0,
          "leaderboard_gpqa": 0, "leaderboard_bbh": 3, "mmlu": 0, "leaderboard_mmlu_pro": 5}


def test_shipped_suites_follow_the_paper():
    paper = load_suite("paper16")
    assert {t.task: t.num_fewshot for t in paper.tasks} == TABLE6
    assert paper.settings.dtype == "float16" and paper.settings.batch_size == "auto"
    assert not paper.settings.apply_chat_template
    assert len(load_suite("medical").tasks) == 8 and len(load_suite("math").tasks) == 9
    metric = {t.task: t.metric for t in paper.tasks}
    assert metric["leaderboard_bbh"] == "acc_norm,none" and metric["leaderboard_mmlu_pro"] == "acc,none"


def test_suite_unknown_key_lists_valid_keys(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump({"name": "s", "tasks": [{"task": "x", "num_fewshot": 0, "metrik": "acc,none"}]}))
    with pytest.raises(ConfigError, match=r"unknown key 'metrik' in tasks\[0\].*did you mean 'metric'.*valid keys"):
        load_suite(path)
    path.write_text(yaml.safe_dump({"name": "s", "tasks": [{"task": "x", "num_fewshot": 0, "metric": "acc"}]}))
    with pytest.raises(ConfigError, match="metric,filter"):
        load_suite(path)
    with pytest.raises(ConfigError, match="did you mean 'paper16'"):
        load_suite("paper61")


def test_unknown_task_fails_before_any_job(lm_family, tmp_path):  # noqa: F811
    suite = write_suite(tmp_path / "bad.yml", lm_family["tasks"],
                        extra_tasks=[{"task": "mini_mcc", "num_fewshot": 0, "metric": "acc,none"}])
    with pytest.raises(ConfigError, match=r"(?s)unknown lm-eval task.*'mini_mcc' \(did you mean 'mini_mc'\?\)"):
        evaluate_models([lm_family["base"]], suite, tmp_path / "out")
    assert not (tmp_path / "out" / "mini" / "results").exists()


def test_metric_the_task_does_not_produce_is_a_recorded_failure(lm_family, tmp_path):  # noqa: F811
    from wildmerge.eval.evaluate import apply_overrides
    from wildmerge.eval.jobs import make_job
    from wildmerge.eval.store import read_result
    from wildmerge.eval.worker import child_main
    from wildmerge.atomic import write_json

    suite = load_suite(write_suite(tmp_path / "s.yml", lm_family["tasks"], metric_mc="acc_norm,none"))
    suite = apply_overrides(suite, {"limit": 2})
    job = make_job(lm_family["base"], "sha256:x", suite, str(lm_family["tasks"]), False).to_dict()
    job["result_path"], job["log_path"] = str(tmp_path / "r.json"), str(tmp_path / "r.log")
    write_json(tmp_path / "job.json", job)
    assert child_main(str(tmp_path / "job.json")) == 1
    record = read_result(tmp_path / "r.json")
    assert record["status"] == "failed"
    assert "did not produce metric 'acc_norm,none'" in record["error"] and "acc,none" in record["error"]


def test_missing_model_and_pickle_only_model_are_clear_errors(lm_family, tmp_path, capsys):  # noqa: F811
    assert main(["eval", "--model", str(tmp_path / "nope"), "--suite", lm_family["suite"]]) == 2
    assert "does not exist" in capsys.readouterr().err
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(Path(lm_family["base"]) / "config.json", pickled)
    (pickled / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(WildmergeError, match="pickle weights.*--allow-pickle"):
        evaluate_models([str(pickled)], lm_family["suite"], tmp_path / "out")
    assert main(["eval", str(tmp_path), "--model", "x", "--suite", "paper16"]) == 2


def test_fingerprint_follows_content_not_path(lm_family, tmp_path):  # noqa: F811
    cache = FingerprintCache(tmp_path / "fp.json")
    base, copy = fingerprint_model(lm_family["experts"][0], cache), fingerprint_model(lm_family["copy"], cache)
    assert base == copy and base != fingerprint_model(lm_family["base"], cache)
    changed = tmp_path / "changed"
    shutil.copytree(lm_family["copy"], changed)
    weights = changed / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one byte of one weight: same header, same size
    weights.write_bytes(bytes(data))
    assert fingerprint_model(changed, cache) != base
    config = json.loads((changed / "config.json").read_text())
    config["transformers_version"] = "0.0.0"  # volatile keys do not change what is measured
    (changed / "config.json").write_text(json.dumps(config))
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert fingerprint_model(changed, cache) == base
    cache.save()
    assert json.loads((tmp_path / "fp.json").read_text())


def test_family_has_tokenizer_and_tasks(lm_family):  # noqa: F811
    """The fixture itself: lm-eval needs a tokenizer beside the weights and task YAMLs with absolute paths."""
    assert (Path(lm_family["base"]) / "tokenizer.json").is_file()
    mc = yaml.safe_load((lm_family["tasks"] / "mini_mc.yaml").read_text())
    assert Path(mc["dataset_kwargs"]["data_files"]["test"]).is_absolute()
