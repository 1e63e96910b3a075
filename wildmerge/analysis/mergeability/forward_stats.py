"""Activation, encoder-gradient and input-gradient Gram matrices of the experts, from per-model cached passes.

Cache keys: activations and input gradients per (model, data source expert), so the pooled set can grow with the
pool without recomputing old (model, source) blocks; the encoder gradient per (model, its own items), written to disk
as float32 safetensors and read back tensor by tensor for the Gram matrix (never all gradients in memory at once).
"""

import contextlib
import time
from typing import Dict, List

import numpy as np
from tqdm.auto import tqdm

from wildmerge.analysis.mergeability.cache import StatsCache, data_fingerprint
from wildmerge.analysis.mergeability.data import encode, pick
from wildmerge.threads import torch_threads


def _batches(items: List[dict], tok, ds, pad_to=None) -> List[dict]:
    return [encode(items[i:i + ds.batch_size], tok, ds.max_len, pad_to) for i in range(0, len(items), ds.batch_size)]


def forward_grams(base, experts: Dict[str, str], fps, calibration, settings, cache: StatsCache, scope: List[str],
                  progress: bool = True):
    import torch
    from transformers import AutoTokenizer

    ds, groups = settings.data, set(settings.groups)
    names = list(experts)
    tok = AutoTokenizer.from_pretrained(base)
    pooled = {s: pick(calibration[s], ds.n_pooled, ds.seed, s) for s in names}
    own = {e: pick(calibration[e], ds.n_own, ds.seed, e) for e in names}
    dkey = ds.model_dump()
    src = {s: data_fingerprint(pooled[s]) for s in names}
    key_act = lambda e, s: f"{fps[e]}__{src[s]}"
    key_enc = lambda e: f"{fps[e]}__{data_fingerprint(own[e])}"
    in_scope = set(scope)
    todo = []
    for e in names:
        jobs = []
        for s in names:
            if "activations" in groups and cache.get("activation", dkey, key_act(e, s)) is None:
                jobs.append(("activation", s))
            if "gradients" in groups and cache.get("input_grad", dkey, key_act(e, s)) is None:
                jobs.append(("input", s))
        if "gradients" in groups and cache.get("encoder_grad", dkey, key_enc(e)) is None:
            jobs.append(("encoder", e))
        if jobs:
            todo.append((e, jobs))
    seconds = {"load": 0.0, "activation": 0.0, "input": 0.0, "encoder": 0.0}
    with torch_threads(settings.threads):
        _passes(todo, experts, settings, cache, tok, pooled, own, dkey, key_act, key_enc, in_scope, progress, seconds)
    grams = {}
    n_pooled = sum(len(pooled[s]) for s in names)
    started = time.perf_counter()
    if "activations" in groups:
        means = []
        for e in names:
            blocks = [cache.get("activation", dkey, key_act(e, s)) for s in names]
            means.append(sum(b["sum"] for b in blocks) / sum(int(b["count"]) for b in blocks))
        A = torch.stack(means).double()
        grams["activation"] = (A @ A.T).numpy()
    seconds["activation"] += time.perf_counter() - started
    started = time.perf_counter()
    if "gradients" in groups:
        G = np.zeros((len(names), len(names)))
        for s in names:  # input gradients of the per-item losses; the pooled mean divides by N_total
            X = torch.stack([cache.get("input_grad", dkey, key_act(e, s))["g"].reshape(-1) for e in names]).double()
            G += (X @ X.T).numpy()
        grams["input"] = G / n_pooled ** 2
        grams["encoder"] = _encoder_gram(cache, dkey, [key_enc(e) for e in names], scope)
    seconds["gradient_grams"] = time.perf_counter() - started
    info = {"seconds": {k: round(v, 3) for k, v in seconds.items()},
            "pooled_items": {s: len(pooled[s]) for s in names}, "own_items": {e: len(own[e]) for e in names},
            "models_computed": [e for e, _ in todo], "tokenizer": base,
            "input_gradient_mode": "pooled (both models on the same items, each item's gold answer)",
            "encoder_gradient_data": "each expert's own labelled items (loss on answer tokens)"}
    return grams, info


def _passes(todo, experts, settings, cache, tok, pooled, own, dkey, key_act, key_enc, in_scope, progress,
            seconds: Dict[str, float]) -> None:
    """Load each model that misses a statistic once and compute what it misses; ``seconds``: per kind of pass
    (activation, input, encoder) and model loads, added to."""
    import torch

    from wildmerge.analysis.mergeability.forward import activation_sum, encoder_gradient, input_gradient, load_model

    ds = settings.data
    for e, jobs in tqdm(todo, desc="forward/backward passes", unit="model", disable=not progress):
        started = time.perf_counter()
        model = load_model(experts[e], settings.device)
        seconds["load"] += time.perf_counter() - started
        for kind, s in jobs:
            started = time.perf_counter()
            if kind == "activation":
                total, n = activation_sum(model, _batches(pooled[s], tok, ds))
                cache.put("activation", dkey, key_act(e, s), {"sum": total, "count": torch.tensor(n)})
            elif kind == "input":
                g = input_gradient(model, _batches(pooled[s], tok, ds, pad_to=ds.max_len))
                cache.put("input_grad", dkey, key_act(e, s), {"g": g})
            else:
                grads = encoder_gradient(model, _batches(own[e], tok, ds), lambda n: n in in_scope)
                cache.put("encoder_grad", dkey, key_enc(e), grads)
            seconds[kind] += time.perf_counter() - started
        del model


def _encoder_gram(cache: StatsCache, dkey: dict, keys: List[str], scope: List[str]) -> np.ndarray:
    """Gram matrix of the per-model gradient vectors, one parameter tensor of every model at a time."""
    import torch
    from safetensors import safe_open

    G = torch.zeros(len(keys), len(keys), dtype=torch.float64)
    with contextlib.ExitStack() as stack:
        if cache.root is None:
            sources = [cache.get("encoder_grad", dkey, k) for k in keys]
            get = lambda i, n: sources[i].get(n)
        else:
            handles = [stack.enter_context(safe_open(str(cache.path("encoder_grad", dkey, k)), framework="pt"))
                       for k in keys]
            present = [set(h.keys()) for h in handles]
            get = lambda i, n: handles[i].get_tensor(n) if n in present[i] else None
        for name in scope:
            parts = [get(i, name) for i in range(len(keys))]
            if all(p is None for p in parts):
                continue
            ref = next(p for p in parts if p is not None)
            D = torch.stack([(p if p is not None else torch.zeros_like(ref)).reshape(-1) for p in parts]).double()
            G += D @ D.T
    return G.numpy()
