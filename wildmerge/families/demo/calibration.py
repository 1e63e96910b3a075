"""Each demo expert's own labelled data: items drawn from its training mixture, never an evaluation prompt.

Per-expert diagnostics (gradient and activation mergeability metrics, RegMean, CoM) need data from each expert's
domain. The demo family knows every expert's mixture, so it writes ``calibration/<expert>.jsonl`` (records with
``prompt``, ``answer`` and ``text``) next to its checkpoints; the family's ``pool.yml`` points each expert at it, and
a pool names it ``demo:calibration/<expert>`` (the labelled part of an expert's ``data:``).
The items are seeded by (family seed, expert name) and derived from the spec, so they are not part of the checksummed
build: writing them is cheap and idempotent.
"""

from pathlib import Path

from wildmerge.families.demo import spec as S
from wildmerge.families.demo.partition import experts_of
from wildmerge.families.demo.skills import SKILLS, Mixture, conflict_world, eval_items, make_world
from wildmerge.families.cache import write_if_changed
from wildmerge.families.items import jsonl

N_ITEMS = 32


def expert_items(name: str, seed: int, quick: bool, n: int = N_ITEMS, partition: str | None = None) -> list:
    """``n`` items of expert ``name``'s own mixture and conventions (calibration seed, disjoint from evaluation)."""
    spec = {e.name: e for e in experts_of(quick, partition)}[name]
    bs = S.build_spec(quick)
    world = make_world(seed, bs.n_entities)
    held_out = {i.prompt for skill in SKILLS for i in eval_items(skill, bs.eval_items, seed, world)}
    source = conflict_world(world, seed) if spec.world == "conflict" else world
    stream = Mixture(spec.mixture, source, held_out, f"{seed}-calibration-{name}", spec.conventions)
    return [next(stream) for _ in range(n)]


def write_calibration(root, seed: int, quick: bool, partition: str | None = None) -> dict:
    """Write (only when changed) one JSONL file per expert (of ``partition``'s family when given); returns
    {expert name: path}."""
    paths = {}
    for e in experts_of(quick, partition):
        records = ({"skill": i.skill, "prompt": i.prompt, "answer": i.answer, "text": i.text()}
                   for i in expert_items(e.name, seed, quick, partition=partition))
        paths[e.name] = str(write_if_changed(Path(root) / "calibration" / f"{e.name}.jsonl", jsonl(records)))
    return paths


def calibration_file(info: dict, expert: str) -> Path:
    """The file behind ``demo:calibration/<expert>`` (written with the family; rewritten if it went missing)."""
    path = Path(info["root"]) / "calibration" / f"{expert}.jsonl"
    if not path.is_file():
        write_calibration(info["root"], info["seed"], info["quick"], info.get("partition"))
    return path
