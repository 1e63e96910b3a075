"""The fresh-head probe's data beside an embedded family: what ``demo/probe_data.py`` and ``demo/smollm2/probe.py``
share.

A probe step is additive: the family stays bit for bit the same, and the probe's splits, joint reference model and
calibration prompts go to a sibling folder ``<family>-probe<V>-seed<S>/``, built once under a claim into a temporary
sibling and moved into place, with ``probe.json`` (how it was made and the SHA-256 of every file) written last as
the completion marker. Each family keeps what is its own: its tasks, its splits and how its joint model is trained.
"""

import json
from pathlib import Path
from typing import Callable

from wildmerge.atomic import atomic_dir, write_json, write_text
from wildmerge.errors import ConfigError
from wildmerge.locks import wait_claim

MANIFEST = "probe.json"
SPLITS = ("train", "validation", "test")


def probe_root(info: dict, seed: int, version: int) -> Path:
    root = Path(info["root"])
    return root.with_name(f"{root.name}-probe{version}-seed{seed}")


def _task_yaml(name: str, files: dict, description: str) -> dict:
    return {
        "task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": files},
        "training_split": "train", "validation_split": "validation", "test_split": "test",
        "output_type": "multiple_choice", "doc_to_text": "{{prompt}}", "doc_to_choice": "{{choices}}",
        "doc_to_target": "gold", "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0, "description": description},
    }


def write_probe_task_yamls(tasks_dir, task_names, description: str) -> None:
    """(Re)write the YAMLs of ``task_names`` (multiple choice over a fixed label set, three splits) with absolute
    data paths (lm-eval resolves relative ones against the CWD)."""
    import yaml

    tasks_dir = Path(tasks_dir).resolve()
    for name in task_names:
        files = {s: str(tasks_dir / f"{name}.{s}.jsonl") for s in SPLITS}
        text = yaml.safe_dump(_task_yaml(name, files, description), sort_keys=False)
        path = tasks_dir / f"{name}.yaml"
        if not path.exists() or path.read_text() != text:
            write_text(path, text)


def write_splits(out: Path, splits: dict) -> None:
    """``splits`` (``{task: {split: [doc]}}``) as ``tasks/<task>.<split>.jsonl`` under ``out``."""
    for name, by_split in splits.items():
        for split, docs in by_split.items():
            write_text(out / "tasks" / f"{name}.{split}.jsonl", "".join(json.dumps(d) + "\n" for d in docs))


def finish(out: Path, record: dict) -> dict:
    """Write ``record`` with the SHA-256 of every file under ``out`` as ``probe.json``, last (the completion marker)."""
    from wildmerge.demo.build import checksums

    record["files"] = checksums(out)
    write_json(out / MANIFEST, record)
    return record


def _intact(root: Path, version: int) -> bool:
    from wildmerge.demo.build import sha256

    try:
        record = json.loads((root / MANIFEST).read_text())
        return record.get("probe_version") == version and all(
            (root / rel).is_file() and sha256(root / rel) == digest for rel, digest in record["files"].items())
    except (OSError, ValueError, KeyError):
        return False


def ensure_probe_folder(info: dict, seed: int, version: int, task_names, description: str,
                        build: Callable[[Path], dict]) -> dict:
    """The probe folder for the family ``info`` and ``seed``: reused when intact, else built by ``build(tmp)`` (which
    ends with ``finish``). Returns paths: ``root``, ``tasks`` (lm-eval include path), ``task_names``, ``joint``,
    ``calibration`` ({expert: jsonl}) and ``manifest``."""
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"probe seed must be a non-negative integer, got {seed!r}")
    root = probe_root(info, seed, version)
    with wait_claim(root.with_name(f".{root.name}.lock")):
        if not _intact(root, version):
            with atomic_dir(root) as tmp:
                build(Path(tmp))
        write_probe_task_yamls(root / "tasks", task_names, description)
    record = json.loads((root / MANIFEST).read_text())
    return {"root": str(root), "tasks": str(root / "tasks"), "task_names": list(task_names),
            "joint": str(root / "joint"), "manifest": str(root / MANIFEST),
            "calibration": {name: str(root / rel) for name, rel in record["calibration"].items()}}
