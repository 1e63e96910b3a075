"""The paper's geometry boundary (the fresh-head probe paper, Sec. 4.3, Tables 2 and 7, Fig. 2) on frozen features.

For one backbone, one probe task and one class partition {C_1..C_T} (``partitions.py``):

- **Expert t**: a linear head on the backbone's frozen features, trained on the train items whose label is in C_t
  only, with cross-entropy over the whole label set (the paper's experts, App. B.2, see every output but only their
  own classes); the fresh head's recipe (App. C.1), seed ``seed + t``; its epoch is chosen on C_t's validation items
  (its train items when C_t has none).
- **Ensemble** (Sec. 3.2): argmax of the mean of the T experts' logits, no masking.
- **Composer** (App. C.2): the router (the pool's base, frozen) embeds each test input; c_t = the router's mean
  feature over C_t's train items; per input the top-k experts by cosine similarity (k = 3) get softmax(s / tau)
  weights (tau = 1); class c takes sum of w_t z_t[c] over the selected experts whose C_t holds c, else -1e9.
- **Composer - Ensemble**: per seed, before aggregation.

Experts here are heads, not fine-tuned backbones, so the contrast isolates what the paper attributes it to: whether
the routing feature space supports the partition.
"""

from typing import List, Sequence

from tqdm.auto import tqdm

from wildmerge.analysis.probe.metrics import HeadSettings, accuracy, fit_head, mean_sd
from wildmerge.analysis.probe.partitions import make_partition

TOP_K, TEMPERATURE, SENTINEL = 3, 1.0, -1e9


def head_experts(train, val, parts: List[List[int]], n_labels: int, seed: int, settings: HeadSettings) -> list:
    """One head per class set, each fitted on that set's items only."""
    import torch

    heads = []
    for t, classes in enumerate(parts):
        keep = lambda y: torch.isin(y, torch.tensor(classes))  # noqa: E731
        tr = keep(train[1])
        va = keep(val[1])
        pick = (val[0][va], val[1][va]) if bool(va.any()) else (train[0][tr], train[1][tr])
        heads.append(fit_head((train[0][tr], train[1][tr]), pick, n_labels, seed + t, settings)[0])
    return heads


def ensemble_logits(logits):
    """(T, B, L) -> (B, L): the plain mean."""
    return logits.mean(0)


def composer_logits(logits, query, centroids, parts: List[List[int]], top_k: int = TOP_K,
                    temperature: float = TEMPERATURE):
    """(T, B, L) expert logits -> (B, L): top-k centroid routing, each expert masked to its own classes."""
    import torch

    from wildmerge.eval.composition import route

    n_tasks, batch, n_labels = logits.shape
    idx, w = route(query, centroids, top_k, temperature)
    weights = torch.zeros(batch, n_tasks).scatter_(1, idx, w)
    selected = torch.zeros(batch, n_tasks, dtype=torch.bool).scatter_(1, idx, True)
    masks = torch.zeros(n_tasks, n_labels, dtype=torch.bool)
    for t, classes in enumerate(parts):
        masks[t, classes] = True
    z = torch.einsum("bt,tc,tbc->bc", weights, masks.to(logits.dtype), logits)
    covered = (selected.to(logits.dtype) @ masks.to(logits.dtype)) > 0
    return torch.where(covered, z, torch.full_like(z, SENTINEL))


def contrast(backbone: dict, router: dict, parts, n_labels: int, seed: int, settings: HeadSettings) -> dict:
    """Composer and ensemble accuracy on the test split for one head seed."""
    import torch

    split = lambda d, s: (d[s]["features"].float(), d[s]["labels"])  # noqa: E731
    heads = head_experts(split(backbone, "train"), split(backbone, "validation"), parts, n_labels, seed, settings)
    zte, yte = split(backbone, "test")
    with torch.no_grad():
        logits = torch.stack([h(zte) for h in heads])
    rtr, ytr = split(router, "train")
    centroids = torch.stack([rtr[torch.isin(ytr, torch.tensor(c))].mean(0) for c in parts])
    composer = accuracy(composer_logits(logits, router["test"]["features"].float(), centroids, parts), yte)
    ensemble = accuracy(ensemble_logits(logits), yte)
    return {"composer": composer, "ensemble": ensemble, "delta": composer - ensemble}


def geometry_rows(models, tasks: dict, router: str, partitions: Sequence[str], n_tasks: int, cache_root, *,
                  seeds=(0, 1, 2), device="cpu", batch_size=32, max_memory_gib=None,
                  settings: HeadSettings = HeadSettings(), fingerprint=None) -> List[dict]:
    """One row per (model, task, partition): composer, ensemble and their difference, per head seed and mean ± SD.

    Partitions and centroids come from the router's features, so every model of a run shares them (as the paper
    shares the Ward assignment across backbones)."""
    import json

    from wildmerge.analysis.probe.features import features_for
    from wildmerge.errors import WildmergeError
    from wildmerge.eval.fingerprint import fingerprint_model
    from wildmerge.threads import torch_threads

    fingerprint = fingerprint or fingerprint_model
    routed = features_for(router, fingerprint(router), tasks, cache_root, device, batch_size, max_memory_gib)
    parts = {(name, p): make_partition(p, routed[name]["train"]["features"], routed[name]["train"]["labels"], n_tasks)
             for name in tasks for p in partitions}
    rows = []
    with torch_threads(1):  # tiny heads: extra threads only spin on a shared machine
        for model in tqdm(models, desc="partition geometry", unit="model"):
            base = {"model_id": model.model_id, "kind": model.kind, "method": model.method, "n": model.n}
            try:
                data = features_for(model.path, fingerprint(model.path), tasks, cache_root, device, batch_size,
                                    max_memory_gib)
            except WildmergeError as exc:
                why = str(exc).splitlines()[0]
                rows += [{**base, "task": t.label, "partition": p, "status": f"missing: {why}"}
                         for t in tasks.values() for p in partitions]
                continue
            for name, task in tasks.items():
                for p in partitions:
                    classes, why = parts[(name, p)]
                    row = {**base, "task": task.label, "partition": p}
                    if why:
                        rows.append({**row, "status": f"missing: {why}"})
                        continue
                    per_seed = [contrast(data[name], routed[name], classes, len(task.labels), s, settings)
                                for s in seeds]
                    row.update({"status": "ok", "sizes": json.dumps([len(c) for c in classes]),
                                "class_sets": json.dumps([[task.labels[c] for c in cs] for cs in classes]),
                                "seeds": json.dumps(list(seeds))})
                    for key in ("composer", "ensemble", "delta"):
                        values = [r[key] for r in per_seed]
                        row[f"{key}_per_seed"] = json.dumps([round(v, 6) for v in values])
                        row[f"{key}_mean"], row[f"{key}_sd"] = mean_sd(values)
                    rows.append(row)
    return rows
