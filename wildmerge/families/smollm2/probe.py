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

The folder's claim, checks, task YAMLs, fixed-label documents and manifest are ``families/probe_cache.py``'s, as for
the demo family.
"""

import json
import random
from pathlib import Path

from wildmerge.families.smollm2 import spec as S
from wildmerge.families.smollm2.skills import ANSWER_END, CLASSES, SENTIMENTS, TOPICS, Stream, unique_items
from wildmerge.families import probe_cache as P
from wildmerge.families.kernels import record as record_kernels

PROBE_VERSION = 2  # 2: the joint reference trained with the family's pinned kernels
PROBE_SKILLS = ("sentiment", "topic", "lexicon")
PROBE_TASKS = tuple(f"smollm2_probe_{s}" for s in PROBE_SKILLS) + ("smollm2_probe_union",)
DESCRIPTION = "wildmerge SmolLM2 probe task: fixed label set, three splits"
LABELS = {"sentiment": SENTIMENTS, "topic": TOPICS, "lexicon": CLASSES}
SPLIT_SIZES = {"full": (240, 60), "quick": (16, 8)}  # (train, validation) items per task
JOINT = {"full": {"steps": 60, "lr": 5e-5}, "quick": {"steps": 2, "lr": 5e-5}}
CALIBRATION_PROMPTS = {"full": 64, "quick": 8}


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
    return P.probe_tasks("smollm2_probe_", tasks, LABELS, end=ANSWER_END)


def _build(out: Path, info: dict, seed: int, threads: int, progress: bool, kernels_level: str) -> dict:
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wildmerge.families.train import deterministic, save_checkpoint, train

    kernels = record_kernels(kernels_level)
    manifest = json.loads(Path(info["manifest"]).read_text())
    size = "quick" if manifest["quick"] else "full"
    kb = manifest["knowledge_base"]
    P.write_splits(out, probe_splits(info, seed))
    calibration = {}
    for e in S.experts_for(manifest["quick"]):  # the composer's centroids: each expert's own kind of input
        if e.has_data:
            calibration[e.name] = f"calibration/{e.name}.jsonl"
            stream = Stream(e.mixture, kb, f"{manifest['seed']}-{e.name}-probe-{seed}")
            P.write_prompts(out / calibration[e.name], stream, CALIBRATION_PROMPTS[size])
    joint = JOINT[size]
    tokenizer = AutoTokenizer.from_pretrained(info["base"])
    with deterministic(threads):
        model = AutoModelForCausalLM.from_pretrained(info["base"], dtype=torch.float32)
        with tqdm(total=joint["steps"], desc="smollm2 joint reference", unit="step", disable=not progress) as bar:
            losses = train(model, Stream(S.ALL_SKILLS, kb, f"{manifest['seed']}-joint-{seed}"), tokenizer,
                           steps=joint["steps"], lr=joint["lr"], batch=S.build_spec(manifest["quick"]).batch,
                           answers_only=True, seed=seed + 7919, desc="joint", progress=bar)
        save_checkpoint(model, tokenizer, out / "joint")
    record = {"probe_version": PROBE_VERSION, "seed": seed, "family": info["root"], "kernels": kernels,
              "family_builder_version": manifest["builder_version"], "tasks": list(PROBE_TASKS),
              "joint": {"path": "joint", "mixture": S.ALL_SKILLS, **joint,
                        "final_loss": sum(losses[-5:]) / len(losses[-5:])},
              "calibration": calibration}
    return P.finish(out, record)


def ensure_probe_data(info: dict, seed: int = 0, threads: int = 1, progress: bool = True) -> dict:
    """The SmolLM2 family's probe data (splits, joint reference J, the calibration prompts of the experts published
    with data), built once beside ``info``'s folder; the paths ``probe_cache.ensure_probe_folder`` returns."""
    build = P.pinned("smollm2", "WILDMERGE_SMOLLM2", "wildmerge.families.smollm2.probe", info, seed, threads, progress,
                     _build)
    return P.ensure_probe_folder(info, seed, PROBE_VERSION, PROBE_TASKS, DESCRIPTION, build)


if __name__ == "__main__":  # the child process of a pinned-kernel probe build (probe_cache.pinned)
    P.child_main("WILDMERGE_SMOLLM2", _build)
