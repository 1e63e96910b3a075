"""Screening: score a model on a fixed subset of each task's items first, and keep going only where it matters.

Every model is scored on the same items (a seeded, per-task stratified subset: each task keeps the same fraction,
so the suite mean stays a mean over tasks), which makes comparisons between models paired. A paired bootstrap
(items resampled within each task, the same resample for both models) gives an interval on the model's difference
to the base and to the best expert. Where both intervals exclude zero, the model's Table 1 / Table 2 outcome (does
it beat the base, does it beat the best expert) is decided and it stops; the others need the remaining items.
Paired bootstrap for comparing systems on one test set: Koehn (2004), "Statistical significance tests for machine
translation evaluation"; Efron & Tibshirani (1993), ch. 13 (percentile intervals).

``simulate`` replays the rule on models scored on every item (results written with ``record_items``) and
reports the fraction of item evaluations saved and which Table 1 cells would change; ``staged.py`` runs it live.
"""

import math
from typing import Dict, List, Optional, Tuple

import numpy as np

Items = Dict[str, np.ndarray]  # task -> per-document score (0/1 for accuracy), in document order


def screen_items(sizes: Dict[str, int], fraction: float, seed: int = 0) -> Dict[str, np.ndarray]:
    """Per task, ``ceil(fraction * n)`` item indices drawn once with ``seed`` (sorted), the same for every model."""
    if not 0 < fraction <= 1:
        raise ValueError(f"screening fraction must be in (0, 1], got {fraction}")
    rng = np.random.default_rng(seed)
    return {task: np.sort(rng.permutation(n)[: max(1, math.ceil(fraction * n))]) for task, n in sorted(sizes.items())}


def suite_score(items: Items, subset: Optional[Dict[str, np.ndarray]] = None) -> float:
    """The suite mean (mean over tasks of each task's mean) on ``subset`` of the items, or on all of them."""
    return float(np.mean([np.mean(v if subset is None else v[subset[t]]) for t, v in sorted(items.items())]))


def paired_interval(model: Items, reference: Items, subset: Dict[str, np.ndarray], iters: int = 1000,
                    seed: int = 0, level: float = 0.95) -> Tuple[float, float, float]:
    """(difference, low, high) of ``suite_score(model) - suite_score(reference)`` on ``subset``; the interval is
    the percentile interval of a bootstrap that resamples the subset's items within each task, paired."""
    rng = np.random.default_rng(seed)
    diffs = []
    for task in sorted(subset):
        d = (np.asarray(model[task], dtype=np.float64) - np.asarray(reference[task], dtype=np.float64))[subset[task]]
        draws = rng.integers(0, len(d), size=(iters, len(d)))
        diffs.append(d[draws].mean(axis=1))
    boot = np.mean(diffs, axis=0)
    point = suite_score(model, subset) - suite_score(reference, subset)
    tail = (1 - level) / 2
    return point, float(np.quantile(boot, tail)), float(np.quantile(boot, 1 - tail))


def decided(interval: Tuple[float, float, float]) -> bool:
    """The sign of the difference is known: the interval excludes zero."""
    return interval[1] > 0 or interval[2] < 0


def screen_model(model: Items, base: Items, best: Items, subset: Dict[str, np.ndarray], **bootstrap) -> Dict:
    """The screening verdict for one model: its intervals to the base and to the best expert, and whether it stops."""
    vs_base = paired_interval(model, base, subset, **bootstrap)
    vs_best = paired_interval(model, best, subset, **bootstrap)
    return {"vs_base": vs_base, "vs_best": vs_best, "stop": decided(vs_base) and decided(vs_best),
            "screened_score": suite_score(model, subset), "full_score": suite_score(model)}


def simulate(merges: Dict[str, Dict], base: Items, experts: Dict[str, Items], fraction: float, seed: int = 0,
             **bootstrap) -> Dict:
    """Replay screening on fully scored merges (``{model_id: {"items": Items, "cell": (method, n)}}``).

    Returns the fraction of the merges' item evaluations saved, and per Table 1 cell (method, n): the subsets'
    D (mean difference to the base, points) and P (% beating the base) from full scores and from screening (a model
    that stopped keeps its screened score), with whether D keeps its sign and P stays within one subset.
    """
    best = max(experts.values(), key=suite_score)
    subset = screen_items({t: len(v) for t, v in base.items()}, fraction, seed)
    per_model = sum(len(v) for v in base.values())
    screened = sum(len(v) for v in subset.values())
    cells: Dict[Tuple, Dict[str, List[float]]] = {}
    spent = stopped = 0
    for model_id, merge in sorted(merges.items()):
        verdict = screen_model(merge["items"], base, best, subset, seed=seed, **bootstrap)
        spent += screened if verdict["stop"] else per_model
        stopped += verdict["stop"]
        score = verdict["screened_score"] if verdict["stop"] else verdict["full_score"]
        base_score = suite_score(base, subset) if verdict["stop"] else suite_score(base)
        cell = cells.setdefault(tuple(merge["cell"]), {"full": [], "screened": []})
        cell["full"].append(100 * (verdict["full_score"] - suite_score(base)))
        cell["screened"].append(100 * (score - base_score))
    table = {}
    for key, cell in sorted(cells.items()):
        full, scr = np.array(cell["full"]), np.array(cell["screened"])
        p_full, p_scr = 100 * np.mean(full > 0), 100 * np.mean(scr > 0)
        table[key] = {"k": len(full), "D_full": float(full.mean()), "D_screened": float(scr.mean()),
                      "P_full": float(p_full), "P_screened": float(p_scr),
                      "sign_kept": bool(np.sign(full.mean()) == np.sign(scr.mean())),
                      "P_within_one_subset": bool(abs(p_full - p_scr) <= 100 / len(full) + 1e-9)}
    total = per_model * len(merges)
    return {"fraction": fraction, "saved": 1 - spent / total if total else 0.0, "stopped": stopped, "cells": table,
            "sign_changes": [k for k, c in table.items() if not c["sign_kept"]],
            "P_moves": [k for k, c in table.items() if not c["P_within_one_subset"]]}
