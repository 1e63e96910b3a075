"""Frozen features and the native readout of one model on one probe task, computed once and cached.

Per split the cache holds the last-token features (``eval/features.py``), the gold labels and the model's own
scores of every label. A task is **matched** when every label, after lm-eval's delimiter, is one token: then the
native readout is one linear layer (the label tokens' rows of ``lm_head``) over the very feature the fresh head
reads, which is the paper's contrast. Otherwise it is **unmatched**: the native score is lm-eval's sum of
continuation log-probabilities over several tokens, and the fresh head is compared with a different readout family.

Text has no augmentation, so caching is exact: the cache is keyed by the model's content fingerprint and the task's
data hash, and a folder per (model, task) is written atomically (complete or absent).
"""

import json
from pathlib import Path

from wildmerge.atomic import atomic_dir
from wildmerge.errors import WildmergeError
from wildmerge.resources import free_device_memory

FEATURE_VERSION = 1
GIB = 1 << 30


def label_tokens(tokenizer, task):
    """The single token id of each label after the delimiter, or None when some label is several tokens."""
    from wildmerge.eval.features import encode_pair

    ids = []
    for label in task.labels:
        _, cont = encode_pair(tokenizer, task.contexts["test"][0], task.delimiter + label)
        if len(cont) != 1:
            return None
        ids.append(cont[0])
    return ids


def check_fits(model_path: str, task, device: str, max_memory_gib=None) -> None:
    """Refuse, before loading, a model whose weights plus features do not fit the device's free memory."""
    from wildmerge.checkpoints import param_count, read_config

    config = read_config(model_path)
    params = param_count(model_path)
    hidden = int(config.get("hidden_size", 0))
    n_items = sum(len(c) for c in task.contexts.values())
    need = 4 * params + 4 * n_items * (hidden + len(task.labels))  # float32 weights + cached features and scores
    free = free_device_memory(device, "--device") if max_memory_gib is None else max_memory_gib * GIB
    if free is not None and need > free:
        raise WildmergeError(
            f"{model_path}: the model ({params / 1e6:.1f}M parameters, float32) and the features of task "
            f"{task.name!r} ({n_items} items x {hidden}) need {need / GIB:.2f} GiB, more than the "
            f"{free / GIB:.2f} GiB free on {device}; use another --device, a larger --max-memory-gib, or fewer items")


def compute(model, tokenizer, task, batch_size: int = 32) -> dict:
    """{split: {features, labels}} plus ``matched``; the test split also has ``scores``, the native readout's
    score of every label (N is measured on the test split)."""
    import torch
    from tqdm.auto import tqdm

    from wildmerge.eval.features import last_token_features

    ids = label_tokens(tokenizer, task)
    out = {"matched": ids is not None}
    total = sum(len(c) for c in task.contexts.values())
    with tqdm(total=total, desc=f"features {task.name}", unit="item", leave=False) as bar:
        for split, contexts in task.contexts.items():
            z = last_token_features(model, tokenizer, contexts, batch_size, progress=bar)
            out[split] = {"features": z.contiguous(), "labels": torch.tensor(task.gold[split])}
            if split != "test":  # N is read on the test split only
                continue
            head = model.get_output_embeddings()
            with torch.no_grad():
                logits = head(z.to(head.weight.device)).float().cpu()
            if ids is not None:  # the model's own readout over the same feature: lm_head rows of the label tokens
                scores = logits[:, ids]
            else:  # lm-eval's acc: log-likelihood of each label's tokens (one token: read from the same position)
                scores = _loglikelihoods(model, tokenizer, task, contexts, torch.log_softmax(logits, -1), batch_size)
            out[split]["scores"] = scores.contiguous()
    return out


def _loglikelihoods(model, tokenizer, task, contexts, last_logprobs, batch_size):
    """(items, labels) sums of continuation log-probabilities; only multi-token continuations need a forward."""
    import torch

    from wildmerge.eval.features import continuation_loglikelihoods, encode_pair

    scores = torch.empty(len(contexts), len(task.labels))
    longer = []
    for i, context in enumerate(contexts):
        for j, label in enumerate(task.labels):
            _, cont = encode_pair(tokenizer, context, task.delimiter + label)
            if len(cont) == 1:
                scores[i, j] = last_logprobs[i, cont[0]]
            else:
                longer.append((i, j, context, task.delimiter + label))
    values = continuation_loglikelihoods(model, tokenizer, [(c, x) for _, _, c, x in longer], 4 * batch_size)
    for (i, j, _, _), v in zip(longer, values):
        scores[i, j] = v
    return scores


def cache_dir(cache_root, fingerprint: str, task) -> Path:
    return Path(cache_root) / fingerprint.removeprefix("sha256:")[:24] / f"{task.name}-{task.data_hash()}"


def load_cached(folder: Path):
    from safetensors.torch import load_file

    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("feature_version") != FEATURE_VERSION:
            return None
        out = {"matched": meta["matched"]}
        for split in meta["splits"]:
            out[split] = load_file(str(folder / f"{split}.safetensors"))
        return out
    except (OSError, ValueError, KeyError):
        return None  # a damaged cache costs one recomputation


def save(folder: Path, data: dict, meta: dict) -> None:
    from safetensors.torch import save_file

    with atomic_dir(folder) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)
        splits = [k for k in data if k != "matched"]
        for split in splits:
            save_file(data[split], str(tmp / f"{split}.safetensors"))
        (tmp / "meta.json").write_text(json.dumps({**meta, "feature_version": FEATURE_VERSION,
                                                   "matched": data["matched"], "splits": splits}, indent=1))


def features_for(model_path: str, fingerprint: str, tasks: dict, cache_root, device="cpu", batch_size=32,
                 max_memory_gib=None) -> dict:
    """{task name: cached or computed features}; the model is loaded only if some task is not cached."""
    out, todo = {}, []
    for name, task in tasks.items():
        cached = load_cached(cache_dir(cache_root, fingerprint, task))
        if cached is None:
            todo.append(name)
        else:
            out[name] = cached
    if todo:
        for name in todo:
            check_fits(model_path, tasks[name], device, max_memory_gib)
        from wildmerge.eval.features import load_causal_lm

        model, tokenizer = load_causal_lm(model_path, device)
        for name in todo:
            data = compute(model, tokenizer, tasks[name], batch_size)
            save(cache_dir(cache_root, fingerprint, tasks[name]), data,
                 {"model": model_path, "fingerprint": fingerprint, "task": name})
            out[name] = data
        del model
    return out
