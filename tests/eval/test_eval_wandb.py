"""lm-eval's own Weights & Biases logger, for real in W&B's offline mode: every scored job is one W&B run whose
config is the run's manifest and whose summary holds lm-eval's metrics, read back from the files W&B writes."""

import json
import struct

import pytest

from helpers import lm_family, write_plan  # noqa: F401  (fixture)
from wildmerge.errors import ConfigError
from wildmerge.eval.evaluate import evaluate_run
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.store import ResultStore
from wildmerge.hub import ResolvedModel
from wildmerge.run import Manifest, PlanEntry, PoolModels, RunFolder

pytest.importorskip("wandb")  # the dev extra installs it


def wandb_records(path):
    """The records of an offline run's ``run-*.wandb`` file: W&B's 7-byte header, then LevelDB log framing (32 KiB
    blocks; each chunk: checksum, length, type FULL 1 / FIRST 2 / MIDDLE 3 / LAST 4) around protobuf records."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunks = path.read_bytes(), 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:  # block padding
            pos += left
            continue
        chunks, pos = chunks + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


def logged(folder):
    """(config, metrics) of one offline W&B run, as its ``.wandb`` file holds them."""
    config, metrics = {}, {}
    for record in wandb_records(next(folder.glob("run-*.wandb"))):
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
        elif kind == "history":
            metrics.update({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return config, metrics


def test_wandb_args_are_key_value_pairs():
    assert EvalOptions(wandb_args="project=merging, entity=team").wandb_args == {"project": "merging",
                                                                                   "entity": "team"}
    with pytest.raises(ConfigError, match="--wandb-args 'merging': expected key=value pairs"):
        EvalOptions(wandb_args="merging")


def test_scores_and_manifest_reach_wandb_offline(lm_family, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    base, expert = str(lm_family["base"]), str(lm_family["experts"][0])
    run = write_plan(tmp_path / "run", [PlanEntry(model_id="base", kind="base", path=base),
                                        PlanEntry(model_id="expert_a", kind="expert", path=expert)])
    RunFolder(run).write_manifest(Manifest(
        pool="tiny", seed=7, sizes=[1], k=1, subsets=[], sampling={"seed": 7},
        models=PoolModels(base=ResolvedModel(name="base", model=base, kind="local", path=base),
                          experts=[ResolvedModel(name="expert_a", model=expert, kind="local", path=expert)])))
    summary = evaluate_run(run, lm_family["suite"], EvalOptions(executor="serial", wandb_args="project=wm-test"))
    assert summary["ok"] == 2
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2  # one W&B run per scored job
    store = ResultStore(summary["store"])
    seen = set()
    for folder in runs:
        config, metrics = logged(folder)
        assert config["pool"] == "tiny" and config["seed"] == 7 and config["sampling"] == {"seed": 7}  # the manifest
        assert "task_configs" in config  # what lm-eval's logger adds
        job = config["wildmerge_job"]
        seen.update(job["models"])
        scored = store.load(job["job_id"])
        assert metrics["mini_mc/acc"] == pytest.approx(scored["scores"]["mc"])  # lm-eval's own metric names
        assert list((folder / "files" / "media" / "table" / "evaluation").glob("eval_results_*.table.json"))
    assert seen == {"base", "expert_a"}
