"""All pairwise metrics of a set of experts sharing a base: cached per-model passes, then pairwise assembly.

The phases follow Zhou et al. (arXiv 2601.22285): weights (one streamed pass), activations (forward on a shared,
pooled calibration set), gradients (forward + backward on each expert's own labelled items; input gradients on the
pooled set, so both models of a pair see the same inputs). Each phase caches per model, or per (model, data source),
so a new expert adds its own work only.
"""

import itertools
import time
from typing import Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from wildmerge.analysis.mergeability import pairwise as P
from wildmerge.analysis.mergeability.cache import StatsCache, fingerprint
from wildmerge.analysis.mergeability.data import DataSettings, labelled
from wildmerge.analysis.mergeability.registry import CATEGORIES, COSTS, GROUPS, METRICS
from wildmerge.analysis.mergeability.weights import WeightSettings, weight_pass
from wildmerge.errors import ConfigError

Group = Literal["weights", "activations", "gradients"]


class MetricSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    groups: List[Group] = Field(default_factory=lambda: ["weights", "activations", "gradients"])
    weights: WeightSettings = Field(default_factory=WeightSettings)
    data: DataSettings = Field(default_factory=DataSettings)
    device: str = "cpu"  # forward / backward passes
    threads: int = Field(1, ge=1)  # CPU threads of the forward / backward passes; one on a shared machine, as
    # the LAPACK calls (plugins.kernel_pool.lapack_threads); raise it on a quiet many-core node


def pair_key(a: str, b: str) -> str:
    return f"{a}__{b}"


def check_inputs(experts: Dict[str, str], calibration: Dict[str, list], settings: MetricSettings) -> None:
    """Bad input is refused here, before any checkpoint is read."""
    if len(experts) < 2:
        raise ConfigError(f"pairwise metrics need at least 2 experts, got {len(experts)}")
    needs_data = {"activations", "gradients"} & set(settings.groups)
    if not needs_data:
        return
    missing = [e for e in experts if not calibration.get(e)]
    if missing:
        raise ConfigError(f"{', '.join(sorted(needs_data))} metrics need each expert's calibration items; none for "
                          f"{missing}. Add 'calibration:' to those experts in the pool, or use --groups weights")
    if "gradients" in settings.groups:
        unlabelled = [e for e in experts if not labelled(calibration[e])]
        if unlabelled:
            raise ConfigError(f"gradient metrics need labelled items (prompt and answer: the loss is on the answer "
                              f"tokens) but the calibration of {unlabelled} has records without an answer; give "
                              f"answer fields, or leave gradients out with --groups weights,activations")


def compute_metrics(base: str, experts: Dict[str, str], calibration: Optional[Dict[str, list]] = None,
                    settings: Optional[MetricSettings] = None, cache_dir: Optional[str] = None,
                    progress: bool = True):
    """(DataFrame with one row per pair and the 28 metric columns, sidecar dict of settings and diagnostics)."""
    import pandas as pd

    settings = settings or MetricSettings()
    calibration = calibration or {}
    check_inputs(experts, calibration, settings)
    names = list(experts)
    pairs = list(itertools.combinations(names, 2))
    cache = StatsCache(cache_dir, base)
    fps = {n: fingerprint(p) for n, p in experts.items()}
    rows = {pair_key(a, b): {"expert_a": a, "expert_b": b} for a, b in pairs}
    side = {"experts": names, "fingerprints": fps, "settings": settings.model_dump(), "seconds": {},
            "paper": "Zhou et al., Demystifying Mergeability, arXiv 2601.22285"}
    scope = None
    if "weights" in settings.groups:
        t0 = time.time()
        w = _weights(base, experts, fps, pairs, settings.weights, cache, progress)
        scope = w["tensors"]
        for a, b in pairs:
            rows[pair_key(a, b)].update(P.weight_metrics(
                w["self"][a], w["self"][b], w["dots"][(a, b)], w["sketch"][a], w["sketch"][b], w["base_sq"],
                w["tensors"], w["subspace"]))
        side["weights"] = {"tensors": len(w["tensors"]), "subspace_tensors": len(w["subspace"]),
                           "left_out": w["left_out"], "new_models": w["new_models"], "new_pairs": w["new_pairs"],
                           "rank_deficient_tensors": w["rank_deficient"]}
        side["seconds"]["weights"] = round(time.time() - t0, 2)
        side["seconds"]["weights_svd"] = round(w["svd_seconds"], 3)
    if {"activations", "gradients"} & set(settings.groups):
        from wildmerge.analysis.mergeability.forward_stats import forward_grams

        t0 = time.time()
        if scope is None:
            from wildmerge.analysis.mergeability.weights import tensor_scope

            scope = tensor_scope(base)[0]
        grams, info = forward_grams(base, experts, fps, calibration, settings, cache, scope, progress)
        idx = {n: i for i, n in enumerate(names)}
        for a, b in pairs:
            i, j = idx[a], idx[b]
            if "activation" in grams:
                G = grams["activation"]
                rows[pair_key(a, b)].update(P.activation_metrics(G[i, i], G[j, j], G[i, j]))
            for prefix in ("encoder", "input"):
                if prefix in grams:
                    G = grams[prefix]
                    rows[pair_key(a, b)].update(P.gradient_metrics(prefix, G[i, i], G[j, j], G[i, j]))
        side["forward"] = info
        side["seconds"]["forward"] = round(time.time() - t0, 2)
    side["category_cost"] = category_cost(side)
    df = pd.DataFrame(list(rows.values()))
    df.insert(0, "pair", list(rows))
    wanted = [m for g in settings.groups for m in GROUPS[g]]
    df = df[["pair", "expert_a", "expert_b"] + [m for m in METRICS if m in wanted]]
    side["metrics"] = [m for m in METRICS if m in wanted]
    side["nan_metrics"] = [m for m in side["metrics"] if df[m].isna().any()]
    side["constant_metrics"] = [m for m in side["metrics"] if df[m].nunique(dropna=True) <= 1]
    return df, side


def category_cost(side: dict) -> List[dict]:
    """The paper's Table 10 for this computation: per category of metric that was asked for, its operation, what
    it reads, the paper's cost class and the seconds it took here (0 where the cache had everything). The weight
    pass splits into its SVD sketches (effective rank and subspace, shared: each row shows them whole) and the rest
    (task vector); the forward phase into activation passes and gradient passes (with their Gram matrices); loading
    the experts for those passes is shared and shown on its own row."""
    seconds = side["seconds"]
    fwd = side.get("forward", {}).get("seconds", {})
    took = {"task_vector": seconds.get("weights", 0.0) - seconds.get("weights_svd", 0.0),
            "effective_rank": seconds.get("weights_svd", 0.0), "subspace": seconds.get("weights_svd", 0.0),
            "activation": fwd.get("activation", 0.0),
            "gradient": fwd.get("input", 0.0) + fwd.get("encoder", 0.0) + fwd.get("gradient_grams", 0.0)}
    group_of = {c: g for g, names in GROUPS.items() for c in CATEGORIES if set(CATEGORIES[c]) <= set(names)}
    rows = [{"category": c, "metrics": len(CATEGORIES[c]), "operation": COSTS[c][0], "reads": COSTS[c][1],
             "paper_cost": COSTS[c][2], "seconds": round(max(took[c], 0.0), 3)}
            for c in CATEGORIES if group_of[c] in side["settings"]["groups"]]
    if "load" in fwd:
        rows.append({"category": "(expert loads for the forward passes, shared)", "metrics": 0,
                     "operation": "reading each expert into memory once", "reads": "weights", "paper_cost": "",
                     "seconds": round(fwd["load"], 3)})
    return rows


def _weights(base, experts, fps, pairs, ws: WeightSettings, cache: StatsCache, progress) -> dict:
    """Weight statistics from the cache, computing only the missing models and pairs."""
    import torch

    key = ws.cache_key()
    per_model = {n: cache.get("weights", key, fps[n]) for n in experts}
    per_pair = {(a, b): cache.get("weights_pair", key, "__".join(sorted((fps[a], fps[b])))) for a, b in pairs}
    base_stats = cache.get("weights_base", key, "base")
    need_self = {n for n, v in per_model.items() if v is None}
    need_pairs = {p for p, v in per_pair.items() if v is None}
    if base_stats is None and not need_self:
        need_self = {next(iter(experts))}  # the base norms come with any pass
    w = weight_pass(base, experts, need_self, need_pairs, ws, progress)
    if need_self or base_stats is None:
        base_stats = {f"sq::{t}": torch.tensor(v, dtype=torch.float64) for t, v in w["base_sq"].items()}
        cache.put("weights_base", key, "base", base_stats)
    for n in need_self:
        per_model[n] = _pack_model(w["self"][n], w["sketch"][n])
        cache.put("weights", key, fps[n], per_model[n])
    for p in need_pairs:
        per_pair[p] = {f"dot::{t}": torch.tensor(v, dtype=torch.float64) for t, v in w["dots"][p].items()}
        cache.put("weights_pair", key, "__".join(sorted((fps[p[0]], fps[p[1]]))), per_pair[p])
    out = {"tensors": w["tensors"], "subspace": w["subspace"], "left_out": w["left_out"],
           "new_models": sorted(need_self & set(experts)), "new_pairs": len(need_pairs),
           "base_sq": {k[4:]: float(v) for k, v in base_stats.items()}, "self": {}, "sketch": {}, "dots": {},
           "rank_deficient": {}, "svd_seconds": w["svd_seconds"]}
    for n, packed in per_model.items():
        out["self"][n], out["sketch"][n] = _unpack_model(packed)
        out["rank_deficient"][n] = sum(1 for s in out["sketch"][n].values() if s["rank"] < 2 * s["Vt"].shape[0])
    for p, packed in per_pair.items():
        out["dots"][p] = {k[5:]: float(v) for k, v in packed.items()}
    return out


def _pack_model(self_sq: dict, sketch: dict) -> dict:
    import torch

    out = {f"sq::{t}": torch.tensor(v, dtype=torch.float64) for t, v in self_sq.items()}
    for t, s in sketch.items():
        out.update({f"{k}::{t}": s[k] for k in ("U", "Vt", "Vb", "s")})
        out[f"rank::{t}"] = torch.tensor(s["rank"])
    return out


def _unpack_model(packed: dict) -> tuple:
    self_sq, sketch = {}, {}
    for k, v in packed.items():
        kind, t = k.split("::", 1)
        if kind == "sq":
            self_sq[t] = float(v)
        else:
            sketch.setdefault(t, {})[kind] = int(v) if kind == "rank" else v
    return self_sq, sketch
