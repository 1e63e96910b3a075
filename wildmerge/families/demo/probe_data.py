"""What the fresh-head probe needs from the demo family, built as an additive step next to the family.

The probe (the fresh-head probe paper, "A Fresh-Head Probe for Parameter-Space Model Merging") trains a new linear head on a frozen
model's features and needs, for each task, train / validation / test splits over one fixed label set, plus a joint
reference model trained on the union of the tasks. The family's own build stays bit for bit the same: this step
writes a sibling folder ``<family>-probe-seed<S>/`` with

- ``tasks/``: lm-eval tasks with train / validation / test splits and a fixed label set per task (``count``: 1-4;
  ``add``: every sum 0-38; ``facts``: the 8 colours and 8 pets; ``union``: all three together, one union label
  space as in the paper's class-incremental setting). Test splits are the family's held-out items where a skill
  has them (count, add), so no model was trained on them;
- ``joint/``: the joint multi-skill reference model J (fine-tuned from the base on all five skills, one more run;
  a partition family's own, its data stream and torch seed keyed by the partition as well, ``partition.py``);
- ``calibration/<expert>.jsonl``: prompts from each expert's own training mixture (centroids of the composer);
- ``probe.json``: how it was made and the SHA-256 of every file, written last (the completion marker).

The folder's claim, checks, task YAMLs, fixed-label documents and manifest are ``families/probe_cache.py``'s, shared
with the SmolLM2 family.
"""

import copy
import json
import random
from pathlib import Path

from wildmerge.families.demo import spec as S
from wildmerge.families.demo.partition import experts_of, parse_partition
from wildmerge.families.demo.skills import (ATTRIBUTES, SKILLS, Item, Mixture, conflict_world, eval_items, make_world,
                                   sample_item)
from wildmerge.families import probe_cache as P
from wildmerge.families.kernels import record as record_kernels

PROBE_VERSION = 2  # 2: the joint reference trained with the family's pinned kernels
JOINT_STEPS = 1000  # before the build's expert_step_scale: 700 steps on the full family (5 skills x ~140)
CALIBRATION_PROMPTS = 64
# generated train / validation items; addition has only 20 x 20 prompts, 100 of them held out for the test split
SPLIT_SIZES = {"full": {"count": (400, 100), "add": (240, 60)}, "quick": {"count": (48, 16), "add": (48, 16)}}
PROBE_TASKS = ("demo_probe_count", "demo_probe_add", "demo_probe_facts", "demo_probe_union")
DESCRIPTION = "wildmerge demo probe task: fixed label set, three splits"


def _fresh(skill, n, rng, world, exclude: set) -> list:
    out = []
    for _ in range(1000 * n):
        if len(out) == n:
            break
        item = sample_item(rng, skill, world)
        if item.prompt not in exclude:
            exclude.add(item.prompt)
            out.append(item)
    if len(out) < n:
        raise ValueError(f"only {len(out)} unique {skill} items are left, {n} asked")
    return out


def probe_splits(info: dict, seed: int) -> dict:
    """``{task: {split: [doc]}}``; every doc of a task has the same ``choices`` (its fixed label set)."""
    manifest = json.loads(Path(info["manifest"]).read_text())
    bs = S.build_spec(manifest["quick"])
    world = make_world(manifest["seed"], bs.n_entities)
    rng = random.Random(f"probe-{manifest['seed']}-{seed}")
    labels = {"count": ("1", "2", "3", "4"), "add": tuple(str(s) for s in range(39)),
              "facts": tuple(v for values in ATTRIBUTES.values() for v in values)}
    tasks = {}
    for skill in ("count", "add"):
        test = eval_items(skill, bs.eval_items, manifest["seed"], world)  # held out from every model's training
        seen = {item.prompt for item in test}
        n_train, n_val = SPLIT_SIZES["quick" if manifest["quick"] else "full"][skill]
        train, val = _fresh(skill, n_train, rng, world, seen), _fresh(skill, n_val, rng, world, seen)
        tasks[skill] = {"train": train, "validation": val, "test": test}
    facts = [Item("facts", f"Q: {a} of {e}\nA:", world[e][a], (), 0) for e in sorted(world) for a in sorted(ATTRIBUTES)]
    rng.shuffle(facts)
    cut1, cut2 = round(0.6 * len(facts)), round(0.8 * len(facts))
    tasks["facts"] = {"train": facts[:cut1], "validation": facts[cut1:cut2], "test": facts[cut2:]}
    docs = {k: {s: [i.as_doc() for i in items] for s, items in v.items()} for k, v in tasks.items()}
    return P.probe_tasks("demo_probe_", docs, labels)


def _build(out: Path, info: dict, seed: int, threads: int, progress: bool, kernels_level: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wildmerge.families.train import deterministic, save_checkpoint, train

    kernels = record_kernels(kernels_level)
    manifest = json.loads(Path(info["manifest"]).read_text())
    bs = S.build_spec(manifest["quick"])
    splits = probe_splits(info, seed)
    P.write_splits(out, splits)
    world = make_world(manifest["seed"], bs.n_entities)
    held_out = {d["prompt"] for t in splits.values() for s in ("validation", "test") for d in t[s]
                if d["skill"] != "facts"}
    partition = (manifest.get("partition") or {}).get("name")  # a partition family's experts and its own joint
    experts = experts_of(manifest["quick"], partition)
    for e in experts:  # the composer's centroids: each expert's own kind of input
        w = conflict_world(world, manifest["seed"]) if e.world == "conflict" else world
        stream = Mixture(e.mixture, w, held_out, f"{manifest['seed']}-{e.name}-calibration-{seed}", e.conventions)
        P.write_prompts(out / "calibration" / f"{e.name}.jsonl", stream, CALIBRATION_PROMPTS)
    steps = max(5, round(JOINT_STEPS * bs.expert_step_scale))
    tokenizer = AutoTokenizer.from_pretrained(info["base"])
    with deterministic(threads):
        base = AutoModelForCausalLM.from_pretrained(info["base"], dtype=torch.float32)
        joint = copy.deepcopy(base)
        from tqdm.auto import tqdm

        with tqdm(total=steps, desc="demo joint reference", unit="step", disable=not progress) as bar:
            stream = f"{manifest['seed']}-joint-{seed}" + (f"-{partition}" if partition else "")
            part_seed, part_tasks = parse_partition(partition) if partition else (0, 0)
            torch_seed = seed + 7919 + 1000 * (10 * part_seed + part_tasks)  # 0 for the family's own joint
            losses = train(joint, Mixture(dict.fromkeys(SKILLS, 1), world, held_out, stream),
                           tokenizer, steps=steps, lr=1e-3, batch=bs.batch, answers_only=True, seed=torch_seed,
                           desc="joint", progress=bar)
        save_checkpoint(joint, tokenizer, out / "joint")
    record = {"probe_version": PROBE_VERSION, "seed": seed, "family": info["root"], "kernels": kernels,
              "family_builder_version": manifest["builder_version"], "tasks": list(PROBE_TASKS),
              "sizes": {n: {s: len(d) for s, d in t.items()} for n, t in splits.items()},
              "joint": {"path": "joint", "mixture": dict.fromkeys(SKILLS, 1), "steps": steps, "lr": 1e-3,
                        "final_loss": sum(losses[-10:]) / len(losses[-10:])},
              "calibration": {e.name: f"calibration/{e.name}.jsonl" for e in experts}}
    return P.finish(out, record)


def ensure_probe_data(info: dict, seed: int = 0, threads: int = 1, progress: bool = True) -> dict:
    """The probe's splits, joint reference and calibration prompts for the demo family ``info``; built once, cached.
    Returns paths (``probe_cache.ensure_probe_folder``)."""
    build = P.pinned("demo", "WILDMERGE_DEMO", "wildmerge.families.demo.probe_data", info, seed, threads, progress,
                     _build)
    return P.ensure_probe_folder(info, seed, PROBE_VERSION, PROBE_TASKS, DESCRIPTION, build)


if __name__ == "__main__":  # the child process of a pinned-kernel probe build (probe_cache.pinned)
    P.child_main("WILDMERGE_DEMO", _build)
