"""What the fresh-head probe needs from the SmolLM2 family, built as an additive step next to it.

The probe (the fresh-head probe paper) trains a new linear head on a frozen model's features and needs, per task,
train / validation / test splits over one fixed label set, plus a joint reference model trained on the union of the
tasks. The family stays bit for bit the same: this step writes a sibling folder ``<family>-probe<V>-seed<S>/`` with

- ``tasks/``: lm-eval tasks ``smollm2_probe_{sentiment,topic,lexicon}`` with fixed labels (2 sentiments, 4 topics,
  4 word classes) and ``smollm2_probe_union`` (all three in one label space). Train and validation items are fresh
  train-split draws (80 / 20 of what the split holds, when it holds fewer than asked); the test split is the
  family's own test items, so no model of the family was trained on them;
- ``joint/``: the joint reference J, fine-tuned from the base on the mixture of all seven skills;
- ``calibration/<expert>.jsonl``: prompts from each expert's own training mixture (the composer's centroids), for
  the experts published with data;
- ``probe.json``: how it was made and the SHA-256 of every file, written last (the completion marker).
"""

import json
import random
from pathlib import Path

from wildmerge.atomic import atomic_dir, write_json, write_text
from wildmerge.demo.smollm2 import spec as S
from wildmerge.demo.smollm2.skills import CLASSES, SENTIMENTS, TOPICS, Stream, choices_with_end, unique_items
from wildmerge.errors import ConfigError

PROBE_VERSION = 1
MANIFEST = "probe.json"
PROBE_SKILLS = ("sentiment", "topic", "lexicon")
PROBE_TASKS = tuple(f"smollm2_probe_{s}" for s in PROBE_SKILLS) + ("smollm2_probe_union",)
LABELS = {"sentiment": SENTIMENTS, "topic": TOPICS, "lexicon": CLASSES}
SPLIT_SIZES = {"full": (240, 60), "quick": (16, 8)}  # (train, validation) items per task
JOINT = {"full": {"steps": 60, "lr": 5e-5}, "quick": {"steps": 2, "lr": 5e-5}}
CALIBRATION_PROMPTS = {"full": 64, "quick": 8}


def probe_root(info: dict, seed: int) -> Path:
    root = Path(info["root"])
    return root.with_name(f"{root.name}-probe{PROBE_VERSION}-seed{seed}")


def _doc(item: dict, labels: tuple) -> dict:
    return {"skill": item["skill"], "prompt": item["prompt"], "answer": item["answer"],
            "choices": choices_with_end(labels), "gold": labels.index(item["answer"])}


def probe_splits(info: dict, seed: int) -> dict:
    """``{task: {split: [doc]}}``; every doc of a task has the same ``choices`` (its fixed label set)."""
    manifest = json.loads(Path(info["manifest"]).read_text())
    size = "quick" if manifest["quick"] else "full"
    rng = random.Random(f"smollm2-probe-{manifest['seed']}-{seed}")
    kb = manifest["knowledge_base"]
    tasks = {}
    for skill in PROBE_SKILLS:
        test = [json.loads(line) for line in (Path(info["tasks"]) / f"{skill}.jsonl").read_text().splitlines()]
        n_train, n_val = SPLIT_SIZES[size]
        drawn = unique_items(skill, n_train + n_val, rng, kb, "train")
        docs = [{"skill": i.skill, "prompt": i.prompt, "answer": i.answer} for i in drawn]
        cut = round(len(docs) * n_train / (n_train + n_val))
        tasks[skill] = {"train": docs[:cut], "validation": docs[cut:], "test": test}
    out = {f"smollm2_probe_{k}": {s: [_doc(d, LABELS[k]) for d in docs] for s, docs in v.items()}
           for k, v in tasks.items()}
    union = tuple(dict.fromkeys(label for k in PROBE_SKILLS for label in LABELS[k]))
    out["smollm2_probe_union"] = {s: [_doc(d, union) for k in PROBE_SKILLS for d in tasks[k][s]]
                                  for s in ("train", "validation", "test")}
    return out


def _task_yaml(name: str, files: dict) -> dict:
    return {
        "task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": files},
        "training_split": "train", "validation_split": "validation", "test_split": "test",
        "output_type": "multiple_choice", "doc_to_text": "{{prompt}}", "doc_to_choice": "{{choices}}",
        "doc_to_target": "gold", "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0, "description": "wildmerge SmolLM2 probe task: fixed label set, three splits"},
    }


def write_probe_task_yamls(tasks_dir) -> None:
    """(Re)write the YAMLs with absolute data paths (lm-eval resolves relative ones against the CWD)."""
    import yaml

    tasks_dir = Path(tasks_dir).resolve()
    for name in PROBE_TASKS:
        files = {s: str(tasks_dir / f"{name}.{s}.jsonl") for s in ("train", "validation", "test")}
        text = yaml.safe_dump(_task_yaml(name, files), sort_keys=False)
        path = tasks_dir / f"{name}.yaml"
        if not path.exists() or path.read_text() != text:
            write_text(path, text)


def _build(out: Path, info: dict, seed: int, threads: int, progress: bool) -> dict:
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wildmerge.demo.build import checksums
    from wildmerge.demo.smollm2.experts import save
    from wildmerge.demo.train import deterministic, train

    manifest = json.loads(Path(info["manifest"]).read_text())
    size = "quick" if manifest["quick"] else "full"
    kb = manifest["knowledge_base"]
    for name, by_split in probe_splits(info, seed).items():
        for split, docs in by_split.items():
            write_text(out / "tasks" / f"{name}.{split}.jsonl", "".join(json.dumps(d) + "\n" for d in docs))
    calibration = {}
    for e in S.experts_for(manifest["quick"]):  # the composer's centroids: each expert's own kind of input
        if e.has_data:
            stream = Stream(e.mixture, kb, f"{manifest['seed']}-{e.name}-probe-{seed}")
            rows = [json.dumps({"text": next(stream).prompt}) + "\n" for _ in range(CALIBRATION_PROMPTS[size])]
            calibration[e.name] = f"calibration/{e.name}.jsonl"
            write_text(out / calibration[e.name], "".join(rows))
    joint = JOINT[size]
    tokenizer = AutoTokenizer.from_pretrained(info["base"])
    with deterministic(threads):
        model = AutoModelForCausalLM.from_pretrained(info["base"], dtype=torch.float32)
        with tqdm(total=joint["steps"], desc="smollm2 joint reference", unit="step", disable=not progress) as bar:
            losses = train(model, Stream(S.ALL_SKILLS, kb, f"{manifest['seed']}-joint-{seed}"), tokenizer,
                           steps=joint["steps"], lr=joint["lr"], batch=S.build_spec(manifest["quick"]).batch,
                           answers_only=True, seed=seed + 7919, desc="joint", progress=bar)
        save(model, tokenizer, out / "joint")
    record = {"probe_version": PROBE_VERSION, "seed": seed, "family": info["root"],
              "family_builder_version": manifest["builder_version"], "tasks": list(PROBE_TASKS),
              "joint": {"path": "joint", "mixture": S.ALL_SKILLS, **joint,
                        "final_loss": sum(losses[-5:]) / len(losses[-5:])},
              "calibration": calibration}
    record["files"] = checksums(out)
    write_json(out / MANIFEST, record)
    return record


def _intact(root: Path) -> bool:
    from wildmerge.demo.build import sha256

    try:
        record = json.loads((root / MANIFEST).read_text())
        return record.get("probe_version") == PROBE_VERSION and all(
            (root / rel).is_file() and sha256(root / rel) == digest for rel, digest in record["files"].items())
    except (OSError, ValueError, KeyError):
        return False


def ensure_probe_data(info: dict, seed: int = 0, threads: int = 1, progress: bool = True) -> dict:
    """The probe's splits, joint reference and calibration prompts for the family ``info``; built once, cached.

    Returns paths: ``root``, ``tasks`` (lm-eval include path), ``task_names``, ``joint``, ``calibration``
    ({expert: jsonl}) and ``manifest``.
    """
    from wildmerge.locks import wait_claim

    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"probe seed must be a non-negative integer, got {seed!r}")
    root = probe_root(info, seed)
    with wait_claim(root.with_name(f".{root.name}.lock")):
        if not _intact(root):
            with atomic_dir(root) as tmp:
                _build(Path(tmp), info, seed, threads, progress)
        write_probe_task_yamls(root / "tasks")
    record = json.loads((root / MANIFEST).read_text())
    return {"root": str(root), "tasks": str(root / "tasks"), "task_names": list(PROBE_TASKS),
            "joint": str(root / "joint"), "manifest": str(root / MANIFEST),
            "calibration": {name: str(root / rel) for name, rel in record["calibration"].items()}}
