"""Unlabelled per-expert text for the demo family: fresh draws from each expert's own training mixture.

The task alignment score (the reality-check paper) compares a merge with each expert on that expert's own unlabelled data, 128
samples per task by default: more than the small labelled calibration set. The demo experts were trained on seeded
skill streams, so a new seed of the same stream is in-domain text that never contains an evaluation prompt. Files
are derived (like the task YAMLs), written atomically once into ``<family>/calibration/<expert>.unlabelled.jsonl``.
"""

import json
from pathlib import Path

from wildmerge.atomic import write_text
from wildmerge.families.demo.skills import SKILLS, Mixture, conflict_world, eval_items, make_world
from wildmerge.families.items import jsonl

N_TEXTS = 256


def unlabelled_file(info: dict, expert: str) -> Path:
    """``<family>/calibration/<expert>.unlabelled.jsonl`` (records ``{"text": ...}``), written on first use."""
    root = Path(info["root"])
    path = root / "calibration" / f"{expert}.unlabelled.jsonl"
    if path.is_file():
        return path
    manifest = json.loads((root / "family.json").read_text())
    spec = next((e for e in manifest["experts"] if e["name"] == expert), None)
    if spec is None:
        raise KeyError(expert)
    seed = manifest["seed"]
    world = make_world(seed, manifest["spec"]["n_entities"])
    evals = {skill: eval_items(skill, manifest["spec"]["eval_items"], seed, world) for skill in SKILLS}
    held_out = {item.prompt for items in evals.values() for item in items}
    stream = Mixture(spec["mixture"], conflict_world(world, seed) if spec["world"] == "conflict" else world,
                     held_out, f"unlabelled-{seed}-{expert}", spec.get("conventions") or {})
    write_text(path, jsonl({"text": next(stream).text()} for _ in range(N_TEXTS)))
    return path
