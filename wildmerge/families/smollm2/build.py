"""Build the whole SmolLM2 family into one folder: the dequantised base, the experts, their data, the test items,
and ``family.json``.

``family.json`` is written last and lists the SHA-256 of every file (``families/cache.py``'s ``finish``): it is the
completion marker that ``family.py`` checks before it uses a cached family. Deterministic: seeded data,
``torch.manual_seed`` before every model, the shared deterministic-kernels context with a fixed thread count, so a
rebuild on one machine gives the same bytes.
"""

import time
from dataclasses import asdict
from pathlib import Path

from wildmerge.families.smollm2 import spec as S
from wildmerge.families.smollm2.skills import SKILLS, eval_items, make_kb
from wildmerge.families import cache as C
from wildmerge.families.kernels import record as record_kernels


def build_family(out_dir, seed: int = 0, quick: bool = False, threads: int = 1, progress: bool = True,
                 kernels_level: str = "native") -> dict:
    """Make and save everything into ``out_dir`` (the caller makes it atomic); returns the manifest.
    ``kernels_level``: the pins this process runs with (``families/kernels.py``), checked and recorded."""
    from tqdm.auto import tqdm

    from wildmerge.families.smollm2.data import write_expert_data
    from wildmerge.families.smollm2.experts import build_expert
    from wildmerge.families.smollm2.source import load_base, source_record
    from wildmerge.families.smollm2.tasks import task_names
    from wildmerge.families.items import write_items
    from wildmerge.families.train import deterministic, save_checkpoint

    start = time.time()
    out, bs = Path(out_dir), S.build_spec(quick)
    source = source_record()  # fails with the install line before any work when the GGUF file is missing
    kb = make_kb(seed, bs.n_countries)
    write_items(out / "tasks", {skill: eval_items(skill, bs.eval_items, seed, kb) for skill in SKILLS})
    experts = S.experts_for(quick)
    manifest = {
        **C.build_record(S.BUILDER_VERSION, seed, quick, threads),
        "kernels": record_kernels(kernels_level),
        "source": source, "spec": asdict(bs), "tasks": {"path": "tasks", "names": task_names()},
        "knowledge_base": kb, "seconds": {},
    }
    total = sum(S.steps_of(e, quick) for e in experts)
    with deterministic(threads), tqdm(total=total, desc="smollm2 family", unit="step", disable=not progress) as bar:
        t = time.time()
        bar.set_description("smollm2 base (dequantising the GGUF file)")
        base, tokenizer = load_base()
        save_checkpoint(base, tokenizer, out / "base")
        manifest["base"] = {"path": "base", "parameters": sum(p.numel() for p in base.parameters()),
                            "dtype": "float32", "tied_embeddings": bool(base.config.tie_word_embeddings),
                            "vocab": len(tokenizer), "hub_id": S.BASE_HUB_ID}
        manifest["seconds"]["base"] = round(time.time() - t, 1)
        bar.write(f"smollm2 base: dequantised and saved in {manifest['seconds']['base']:.0f} s")
        manifest["experts"] = []
        for i, e in enumerate(experts):
            t = time.time()
            bar.set_description(f"smollm2 {e.name}")
            record = build_expert(e, base, tokenizer, kb, out / "experts" / e.name, steps=S.steps_of(e, quick),
                                  batch=bs.batch, seed=seed * 1000 + i + 1, progress=bar)
            if e.has_data:
                write_expert_data(out, e, tokenizer, kb, seed, bs.n_text, bs.n_labelled)
                record["data"] = {"text": f"data/{e.name}/text.jsonl", "labelled": f"data/{e.name}/labelled.jsonl"}
            manifest["experts"].append(record)
            manifest["seconds"][e.name] = round(time.time() - t, 1)
            bar.write(f"smollm2 {e.name}: {record['steps']} steps ({e.shape}) in {manifest['seconds'][e.name]:.0f} s, "
                      f"loss {record['first_loss']:.3f} -> {record['final_loss']:.3f}, "
                      f"task vector {record['task_vector_norm']:.3f}")
    manifest["build_seconds"] = round(time.time() - start, 1)
    return C.finish(out, manifest)  # last: the completion marker


if __name__ == "__main__":  # the child process of a pinned-kernel build (smollm2.family._build)
    import os
    import sys

    from wildmerge.lifeline import hold

    hold()  # dies with the process that started it

    _out, _seed, _size, _threads, _progress = sys.argv[1:6]
    build_family(_out, seed=int(_seed), quick=_size == "quick", threads=int(_threads), progress=_progress == "progress",
                 kernels_level=os.environ["WILDMERGE_SMOLLM2_KERNELS"])
