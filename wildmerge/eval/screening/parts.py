"""Score a model on one part of every task's documents: the screening subset, or the rest of them.

A screened evaluation (``staged.py``) scores each model in two parts: first the fixed subset of each leaf task's
documents (``screening.screen_items``), then, where needed, the complement. Both parts go through lm-eval's own
``simple_evaluate(samples={task: [doc indices]})`` (within the suite's ``limit``, if any), with the leaf tasks' ``Task`` objects (a group or tag is split
into its leaves, so a leaf whose rest is empty is simply left out) and per-document scores logged. ``combine``
rebuilds a suite task's score from its leaves' documents: a plain task is the mean of its documents, a group the
mean of all its leaves' documents when lm-eval weights it by size, else (and for a tag) the mean of its leaves.

Only metrics that lm-eval aggregates by a mean over documents can be split this way (acc, acc_norm, exact_match);
another one (a corpus-level F1, perplexity) fails the job with a message.
"""

import math
from typing import Any, Dict, List

import numpy as np

from wildmerge.eval.screening.stats import screen_items

SCREEN, REST = "screen", "rest"


def leaves(loaded: Dict[str, Any], task: str) -> List[str]:
    """The leaf task names of suite task ``task`` in lm-eval's ``TaskManager.load`` output (sorted)."""
    tasks, groups = loaded["tasks"], loaded.get("group_map") or {}
    if task in tasks:
        return [task]
    if task in groups:
        out, todo = [], list(groups[task])
        while todo:
            name = todo.pop()
            out += [name] if name in tasks else []
            todo += list(groups.get(name, []))
        return sorted(out)
    return sorted(tasks)  # a tag runs alone in its call: every loaded task is one of its leaves


def weighted_by_size(loaded: Dict[str, Any], task: str, metric: str) -> bool:
    """Whether lm-eval scores group ``task`` as the mean over all its documents (``weight_by_size``)."""
    group = (loaded.get("groups") or {}).get(task)
    for agg in getattr(group, "aggregate_metric_list", None) or []:
        if getattr(agg, "metric", None) == metric.split(",")[0]:
            return bool(getattr(agg, "weight_by_size", True))
    return False


def part_indices(sizes: Dict[str, int], fraction: float, seed: int, part: str) -> Dict[str, List[int]]:
    """The sorted document indices of each leaf task in ``part`` (screen: the fixed subset; rest: the others)."""
    subset = screen_items(sizes, fraction, seed)
    if part == SCREEN:
        return {t: [int(i) for i in idx] for t, idx in subset.items()}
    return {t: sorted(set(range(sizes[t])) - {int(i) for i in subset[t]}) for t in sizes}


def limited(n: int, limit) -> int:
    """The documents a task has under the suite's ``limit`` (lm-eval's rule: a count, or a fraction rounded up)."""
    if limit is None:
        return n
    return min(n, int(limit) if limit >= 1 else math.ceil(n * limit))


def check_mean_metric(task_obj, leaf: str, metric: str) -> None:
    name = metric.split(",")[0]
    agg = task_obj.aggregation().get(name)
    if getattr(agg, "__name__", "") != "mean":
        raise ValueError(f"task {leaf!r}: metric {name!r} is aggregated by {getattr(agg, '__name__', agg)!r}, not "
                         f"a mean over documents, so it cannot be scored on a subset of items; evaluate this suite "
                         f"without --screen")


def evaluate_part(lm, tm, batch: List[Dict[str, Any]], screen: Dict[str, Any], settings: Dict[str, Any],
                  simple_evaluate) -> Dict[str, Any]:
    """One ``simple_evaluate`` over the leaves of ``batch`` restricted to the part's documents.

    Returns ``{label: {"leaves": {leaf: {"n": docs, "ids": [...], "scores": [...]}}, "by_size": bool}}``.
    """
    loaded = tm.load([t["task"] for t in batch])
    per_label, sizes = {}, {}
    for t in batch:
        names = leaves(loaded, t["task"])
        for leaf in names:
            check_mean_metric(loaded["tasks"][leaf], leaf, t["metric"])
            sizes[leaf] = limited(len(loaded["tasks"][leaf].eval_docs), settings["limit"])
        per_label[t["label"] or t["task"]] = (t, names)
    wanted = {leaf: idx for leaf, idx in part_indices(sizes, screen["fraction"], screen["seed"],
                                                     screen["part"]).items() if idx}
    samples = {}
    if wanted:
        out = simple_evaluate(model=lm, tasks=[loaded["tasks"][leaf] for leaf in sorted(wanted)], samples=wanted,
                              num_fewshot=batch[0]["num_fewshot"], task_manager=tm,
                              bootstrap_iters=settings["bootstrap_iters"],
                              apply_chat_template=settings["apply_chat_template"], log_samples=True)
        samples = out.get("samples") or {}
    result = {}
    for label, (t, names) in per_label.items():
        name, filter_key = t["metric"].split(",", 1)
        parts = {}
        for leaf in names:
            rows = sorted((r for r in samples.get(leaf, []) if r.get("filter") == filter_key),
                          key=lambda r: r["doc_id"])
            parts[leaf] = {"n": sizes[leaf], "ids": [int(r["doc_id"]) for r in rows],
                           "scores": [float(r[name]) for r in rows]}
            if parts[leaf]["ids"] != wanted.get(leaf, []):
                raise ValueError(f"task {leaf!r}: lm-eval scored documents {parts[leaf]['ids'][:5]}... instead of "
                                 f"the {len(wanted.get(leaf, []))} asked for")
        result[label] = {"leaves": parts, "by_size": len(names) > 1 and weighted_by_size(loaded, t["task"],
                                                                                          t["metric"])}
    return result


def merge_parts(*parts: Dict[str, Any]) -> Dict[str, Any]:
    """The union of several parts' documents, per label and leaf, in document order."""
    out: Dict[str, Any] = {}
    for part in parts:
        for label, entry in part.items():
            slot = out.setdefault(label, {"leaves": {}, "by_size": entry["by_size"]})
            for leaf, docs in entry["leaves"].items():
                have = slot["leaves"].setdefault(leaf, {"n": docs["n"], "ids": [], "scores": []})
                pairs = sorted(zip(have["ids"] + docs["ids"], have["scores"] + docs["scores"]))
                have["ids"], have["scores"] = [i for i, _ in pairs], [s for _, s in pairs]
    return out


def combine(entry: Dict[str, Any]) -> float:
    """A suite task's score from its leaves' scored documents (see the module docstring)."""
    docs = [np.asarray(d["scores"], dtype=np.float64) for _, d in sorted(entry["leaves"].items()) if d["scores"]]
    if entry["by_size"]:
        return float(np.concatenate(docs).mean())
    return float(np.mean([d.mean() for d in docs]))


def item_vector(entry: Dict[str, Any]) -> List[float]:
    """A suite task's document scores, leaves one after another (sorted), each in document order."""
    return [s for _, d in sorted(entry["leaves"].items()) for s in d["scores"]]


def counted(entry: Dict[str, Any]) -> int:
    return sum(len(d["ids"]) for d in entry["leaves"].values())
