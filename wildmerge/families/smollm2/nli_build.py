"""Build the SmolLM2 NLI experts into one folder: the dequantised base, one LoRA adapter per genre, each expert's data,
the held-out items of every genre, and ``family.json`` (the SHA-256 of every file, written last).

The experts are fine-tuned like the family's LoRA experts (``families/train.py``: AdamW, warm-up and cosine decay,
the answer's tokens only), with Chain of Merges' LoRA shape: rank 16 on the attention's q, k, v and output
projections, alpha 16 (so W + B A). Deterministic: seeded items, ``torch.manual_seed`` before every adapter, the
shared deterministic-kernels context with a fixed thread count, the family's pinned kernels in a child process.
"""

import json
import time
from dataclasses import asdict
from pathlib import Path

from wildmerge.families import cache as C
from wildmerge.families.kernels import record as record_kernels
from wildmerge.families.smollm2 import nli_spec as N
from wildmerge.families.smollm2.spec import BASE_HUB_ID


def write_expert_data(root, genre: str, seed: int, n_text: int, n_labelled: int) -> dict:
    """An expert's ``text`` (``{"text"}``) and ``labelled`` (``{"skill", "prompt", "answer", "text"}``) files: fresh
    balanced draws from its genre's training split under seeds of their own; returns their paths (relative)."""
    from wildmerge.atomic import write_text
    from wildmerge.families.items import jsonl
    from wildmerge.families.smollm2.nli import balanced_items

    name = N.expert_name(genre)
    paths = {"text": f"data/{name}/text.jsonl", "labelled": f"data/{name}/labelled.jsonl"}
    texts = balanced_items(genre, n_text, f"{seed}-text", "train")
    write_text(Path(root) / paths["text"], jsonl({"text": i.text()} for i in texts))
    items = balanced_items(genre, n_labelled, f"{seed}-labelled", "train")
    write_text(Path(root) / paths["labelled"], jsonl({"skill": i.skill, "prompt": i.prompt, "answer": i.answer,
                                                      "text": i.text()} for i in items))
    return paths


def train_adapter(genre: str, base, tokenizer, out: Path, *, bs: N.NliBuild, seed: int, progress=None) -> dict:
    """Fine-tune a LoRA adapter on ``genre`` from ``base`` (left untouched), save it into ``out``; its record."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    from wildmerge.families.smollm2.experts import _lora_norm
    from wildmerge.families.smollm2.nli import NliStream
    from wildmerge.families.train import save_checkpoint, train

    torch.manual_seed(seed)
    model = get_peft_model(copy.deepcopy(base), LoraConfig(
        r=N.LORA["r"], lora_alpha=N.LORA["alpha"], target_modules=list(N.LORA["targets"]), lora_dropout=0.0,
        bias="none", task_type="CAUSAL_LM"))
    name = N.expert_name(genre)
    losses = train(model, NliStream(genre, seed), tokenizer, steps=bs.steps, lr=bs.lr, batch=bs.batch,
                   answers_only=True, seed=seed, desc=name, progress=progress)
    model.peft_config["default"].base_model_name_or_path = BASE_HUB_ID
    record = {"name": name, "genre": genre, "domain": "nli", "description": f"NLI on {genre} premises (LoRA)",
              "shape": "lora", "lora": N.LORA, "steps": bs.steps, "lr": bs.lr, "batch": bs.batch,
              "path": f"experts/{name}", "first_loss": losses[0],
              "final_loss": sum(losses[-5:]) / len(losses[-5:]), "task_vector_norm": _lora_norm(model)}
    save_checkpoint(model, tokenizer, out)
    return record


def reused_base(out: Path, source: dict, kernels: dict) -> bool:
    """Link (or copy) into ``out/base`` the base of a finished sibling in the same cache (the family's or another NLI
    build's) that was dequantised from the same GGUF file with the same kernels and library versions, every file
    checked against its SHA-256: the same bytes as dequantising again, without its minutes. False when none fits."""
    import os
    import shutil

    from wildmerge.families.cache import MANIFEST, sha256

    head = C.build_record(N.NLI_VERSION, 0, False, 1)["versions"]
    for manifest_path in sorted(out.parent.glob(f"*/{MANIFEST}")):
        try:
            built = json.loads(manifest_path.read_text())
            fits = (built.get("source"), built.get("kernels"), built.get("versions")) == (source, kernels, head)
            files = {rel: digest for rel, digest in built["files"].items() if rel.startswith("base/")}
        except (OSError, ValueError, KeyError, AttributeError):
            continue
        root = manifest_path.parent
        if not fits or "base/model.safetensors" not in files or not all(
                (root / rel).is_file() and sha256(root / rel) == digest for rel, digest in files.items()):
            continue
        (out / "base").mkdir(parents=True, exist_ok=True)
        for rel in files:
            try:
                os.link(root / rel, out / rel)
            except OSError:
                shutil.copyfile(root / rel, out / rel)
        return True
    return False


def load_or_reuse_base(out: Path, source: dict, kernels: dict):
    """(float32 base, tokenizer), the base saved in ``out/base``: a sibling's checked copy, or dequantised here. The
    tokenizer always comes from the GGUF file (cheap), so the adapters' tokenizer files are the same either way."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wildmerge.families.smollm2.source import gguf_path, load_base
    from wildmerge.families.train import save_checkpoint

    if reused_base(out, source, kernels):
        path = gguf_path()
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        base = AutoModelForCausalLM.from_pretrained(str(out / "base"), dtype=torch.float32)
        base.eval()
        return base, tokenizer
    base, tokenizer = load_base()
    save_checkpoint(base, tokenizer, out / "base")
    return base, tokenizer


def build_nli(out_dir, seed: int = 0, quick: bool = False, threads: int = 1, progress: bool = True,
              kernels_level: str = "native") -> dict:
    """Make and save everything into ``out_dir`` (the caller makes it atomic); returns the manifest."""
    from tqdm.auto import tqdm

    from wildmerge.families.items import write_items
    from wildmerge.families.smollm2.nli import GENRES, eval_items
    from wildmerge.families.smollm2.source import source_record
    from wildmerge.families.train import deterministic

    start, out, bs = time.time(), Path(out_dir), N.build_spec(quick)
    source = source_record()  # fails with the install line before any work when the GGUF file is missing
    write_items(out / "tasks", {N.expert_name(g): eval_items(g, bs.eval_items, seed) for g in GENRES})
    manifest = {**C.build_record(N.NLI_VERSION, seed, quick, threads), "kernels": record_kernels(kernels_level),
                "source": source, "spec": asdict(bs), "tasks": {"path": "tasks", "names": N.task_names()},
                "experts": [], "seconds": {}}
    with deterministic(threads), tqdm(total=bs.steps * len(bs.genres), desc="smollm2 nli", unit="step",
                                      disable=not progress) as bar:
        base, tokenizer = load_or_reuse_base(out, source, manifest["kernels"])
        manifest["base"] = {"path": "base", "hub_id": BASE_HUB_ID, "dtype": "float32"}
        for i, genre in enumerate(bs.genres):
            t = time.time()
            name = N.expert_name(genre)
            record = train_adapter(genre, base, tokenizer, out / "experts" / name, bs=bs, seed=seed * 1000 + i + 1,
                                   progress=bar)
            record["data"] = write_expert_data(out, genre, seed, bs.n_text, bs.n_labelled)
            manifest["experts"].append(record)
            manifest["seconds"][name] = round(time.time() - t, 1)
            bar.write(f"smollm2 {name}: {bs.steps} steps in {manifest['seconds'][name]:.0f} s, loss "
                      f"{record['first_loss']:.3f} -> {record['final_loss']:.3f}")
    manifest["build_seconds"] = round(time.time() - start, 1)
    return C.finish(out, manifest)  # last: the completion marker


if __name__ == "__main__":  # the child process of a pinned-kernel build (nli_family._build)
    import os
    import sys

    from wildmerge.lifeline import hold

    hold()  # dies with the process that started it
    _out, _seed, _size, _threads, _progress = sys.argv[1:6]
    build_nli(_out, seed=int(_seed), quick=_size == "quick", threads=int(_threads), progress=_progress == "progress",
              kernels_level=os.environ["WILDMERGE_SMOLLM2_KERNELS"])
