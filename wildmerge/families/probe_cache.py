"""The fresh-head probe's data beside an embedded family: what ``demo/probe_data.py`` and ``smollm2/probe.py``
share.

A probe step is additive: the family stays bit for bit the same, and the probe's splits, joint reference model and
calibration prompts go to a sibling folder ``<family>-probe<V>-seed<S>/``, built once under a claim into a temporary
sibling and moved into place, with ``probe.json`` (how it was made and the SHA-256 of every file) written last as
the completion marker. Shared too: the fixed-label documents of the probe tasks and their union task, and the
composer's calibration prompts. Each family keeps what is its own: its tasks, its splits and how its joint model is
trained.
"""

import json
import sys
from pathlib import Path
from typing import Callable

from wildmerge.atomic import atomic_dir, write_json, write_text
from wildmerge.errors import ConfigError
from wildmerge.families import kernels
from wildmerge.families.cache import checksums, sha256
from wildmerge.families.items import jsonl
from wildmerge.families.tasks import PROBE_SPLITS, write_probe_task_yamls
from wildmerge.locks import wait_claim

MANIFEST = "probe.json"


def probe_root(info: dict, seed: int, version: int) -> Path:
    root = Path(info["root"])
    return root.with_name(f"{root.name}-probe{version}-seed{seed}")


def probe_tasks(prefix: str, tasks: dict, labels: dict, end: str = "") -> dict:
    """``{<prefix><skill>: {split: [doc]}}`` from ``tasks`` (``{skill: {split: [item]}}``, items with ``skill``,
    ``prompt`` and ``answer``), each over its fixed label set ``labels[skill]`` (an option is a label plus ``end``),
    and ``<prefix>union``: every task's items over the union of the label sets, as in class-incremental learning."""

    def doc(item: dict, labels: tuple) -> dict:
        return {"skill": item["skill"], "prompt": item["prompt"], "answer": item["answer"],
                "choices": [label + end for label in labels], "gold": labels.index(item["answer"])}

    out = {f"{prefix}{k}": {s: [doc(i, labels[k]) for i in items] for s, items in v.items()} for k, v in tasks.items()}
    union = tuple(dict.fromkeys(label for k in tasks for label in labels[k]))
    out[f"{prefix}union"] = {s: [doc(i, union) for k in tasks for i in tasks[k][s]] for s in PROBE_SPLITS}
    return out


def write_prompts(path, stream, n: int) -> None:
    """``n`` prompts of ``stream`` (an expert's own training mixture) as ``{"text"}`` records: the composer's
    centroids."""
    write_text(path, jsonl({"text": next(stream).prompt} for _ in range(n)))


def write_splits(out: Path, splits: dict) -> None:
    """``splits`` (``{task: {split: [doc]}}``) as ``tasks/<task>.<split>.jsonl`` under ``out``."""
    for name, by_split in splits.items():
        for split, docs in by_split.items():
            write_text(out / "tasks" / f"{name}.{split}.jsonl", jsonl(docs))


def finish(out: Path, record: dict) -> dict:
    """Write ``record`` with the SHA-256 of every file under ``out`` as ``probe.json``, last (the completion marker)."""
    record["files"] = checksums(out)
    write_json(out / MANIFEST, record)
    return record


def pinned(label: str, env: str, module: str, info: dict, seed: int, threads: int, progress: bool,
           build: Callable[..., dict]) -> Callable[[Path], None]:
    """A probe folder's ``build(tmp)`` that trains with the family's kernels: the published families' pins in a child
    process ``python -m module`` (whose ``__main__`` calls ``child_main``), as the family itself was built, so the
    joint reference is the same on every x86-64 machine; native kernels here. ``build(out, info=, seed=, threads=,
    progress=, kernels_level=)`` is the family's own probe build."""

    def run(out: Path) -> None:
        args = [out, json.dumps(info), seed, threads, "progress" if progress else "quiet"]
        kernels.build(f"{label} probe", env, module, args,
                      lambda level: build(out, info=info, seed=seed, threads=threads, progress=progress,
                                          kernels_level=level))

    return run


def child_main(env: str, build: Callable[..., dict]) -> None:
    """The pinned child of ``pinned``: dies with its parent, reads the arguments ``pinned`` gave, builds."""
    import os

    from wildmerge.lifeline import hold

    hold()
    out, info, seed, threads, progress = sys.argv[1:6]
    build(Path(out), info=json.loads(info), seed=int(seed), threads=int(threads), progress=progress == "progress",
          kernels_level=os.environ[f"{env}_KERNELS"])


def _intact(root: Path, version: int) -> bool:
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
