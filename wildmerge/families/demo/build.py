"""Build the whole demo family into one folder: tokenizer, base, experts, held-out task data, ``family.json``.

``family.json`` is written last and lists the SHA-256 of every file (``families/cache.py``'s ``finish``): it is
the completion marker that ``family.py`` checks before it uses a cached family.
"""

import copy
import time
from dataclasses import asdict
from pathlib import Path

from wildmerge.families.demo import spec as S
from wildmerge.families.demo.partition import experts_of, task_skills
from wildmerge.families.demo.skills import SKILLS, Mixture, conflict_world, eval_items, known_part, make_world
from wildmerge.families import cache as C
from wildmerge.families.kernels import record as record_kernels


def _tokenizer_corpus(world, conflict, held_out, seed) -> list:
    stream = Mixture(dict.fromkeys(SKILLS, 1), world, held_out, f"{seed}-tok")
    texts = [next(stream).text() for _ in range(3000)]
    for w in (world, conflict):  # every name and value, in both worlds and in the reversed-digit convention
        texts += [f"Q: {a} of {e}\nA: {v}\n" for e in w for a, v in w[e].items()]
    texts += [f"Q: 1+2=\nA: {n}\n" for n in range(200)]
    return texts


def build_family(out_dir, seed: int = 0, quick: bool = False, threads: int = 1, progress: bool = True,
                 kernels_level: str = "native", partition: str | None = None) -> dict:
    """Train and save everything into ``out_dir`` (the caller makes it atomic); returns the manifest.
    ``kernels_level``: the pins this process runs with (``families/kernels.py``), checked and recorded;
    ``partition`` (``random:SEED:T``, ``partition.py``): one expert per random task of skills instead of the 12."""
    from tqdm.auto import tqdm

    from wildmerge.families.demo.model import new_model
    from wildmerge.families.demo.tasks import task_names
    from wildmerge.families.demo.tokenizer import train_tokenizer
    from wildmerge.families.items import write_items
    from wildmerge.families.train import deterministic, save_checkpoint, train

    start = time.time()
    kernels = record_kernels(kernels_level)
    out, bs = Path(out_dir), S.build_spec(quick)
    experts = experts_of(quick, partition)
    world = make_world(seed, bs.n_entities)
    conflict = conflict_world(world, seed)
    evals = {skill: eval_items(skill, bs.eval_items, seed, world) for skill in SKILLS}
    held_out = {item.prompt for items in evals.values() for item in items}
    write_items(out / "tasks", evals)

    def steps_of(e):
        return max(5, round(e.steps * bs.expert_step_scale))

    total = bs.base_steps + sum(steps_of(e) for e in experts)
    manifest = {
        **C.build_record(S.BUILDER_VERSION, seed, quick, threads), "kernels": kernels,
        "spec": asdict(bs), "tasks": {"path": "tasks", "names": task_names()},
        "world": {"entities": len(world), "facts_changed_in_conflict_world":
                  sum(world[e][a] != conflict[e][a] for e in world for a in world[e])},
    }
    if partition is not None:  # recorded only here: the family's own family.json stays as it was
        manifest["partition"] = {"name": partition, "tasks": task_skills(partition)}
    with deterministic(threads), tqdm(total=total, desc="demo family", unit="step", disable=not progress) as bar:
        tokenizer = train_tokenizer(_tokenizer_corpus(world, conflict, held_out, seed), bs.vocab)
        base = new_model(bs, tokenizer, seed)
        bar.set_description("demo base")
        base_world = known_part(world, seed, bs.base_facts_fraction)
        losses = train(base, Mixture(S.BASE_MIXTURE, base_world, held_out, f"{seed}-base"), tokenizer,
                       steps=bs.base_steps, lr=bs.base_lr, batch=bs.batch, answers_only=False, seed=seed,
                       desc="base", weight_decay=0.01, progress=bar)
        save_checkpoint(base, tokenizer, out / "base")
        manifest["base"] = {"path": "base", "parameters": sum(p.numel() for p in base.parameters()),
                            "mixture": S.BASE_MIXTURE, "steps": bs.base_steps, "lr": bs.base_lr,
                            "entities_known": len(base_world),
                            "final_loss": sum(losses[-20:]) / len(losses[-20:])}
        manifest["experts"] = []
        for i, e in enumerate(experts):
            bar.set_description(f"demo {e.name}")
            model = copy.deepcopy(base)
            stream = Mixture(e.mixture, conflict if e.world == "conflict" else world, held_out,
                             f"{seed}-{e.name}", e.conventions)
            losses = train(model, stream, tokenizer, steps=steps_of(e), lr=e.lr, batch=bs.batch,
                           answers_only=True, seed=seed * 1000 + i + 1, desc=e.name, progress=bar)
            save_checkpoint(model, tokenizer, out / "experts" / e.name)
            manifest["experts"].append({**asdict(e), "steps": steps_of(e), "path": f"experts/{e.name}",
                                        "final_loss": sum(losses[-10:]) / len(losses[-10:])})
            del model
    manifest["build_seconds"] = round(time.time() - start, 2)
    return C.finish(out, manifest)  # last: the completion marker


if __name__ == "__main__":  # the child process of a pinned-kernel build (demo.family._build)
    import os
    import sys

    from wildmerge.lifeline import hold

    hold()  # dies with the process that started it

    _out, _seed, _size, _threads, _progress = sys.argv[1:6]
    _partition = sys.argv[6] if len(sys.argv) > 6 else None
    build_family(_out, seed=int(_seed), quick=_size == "quick", threads=int(_threads), progress=_progress == "progress",
                 kernels_level=os.environ["WILDMERGE_DEMO_KERNELS"], partition=_partition)
