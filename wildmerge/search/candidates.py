"""Which merges to try first: subsets ranked by a weight-only proxy, spread over sizes and methods.

No predictor of merge quality is fitted on a new pool, so subsets are ranked by what the task vectors alone say
(``analysis.pool.geometry``): merges of experts whose updates interfere less (low mean pairwise cosine) and whose
updates are of similar size (low spread of norms: the reality-check paper's imbalance, where one large task vector
dominates the sum) rank first. Within each size the best-ranked subsets come first; the list interleaves sizes and
methods so a small budget still tries every size and every method once before a second subset of any size.
"""

import itertools
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

MAX_PER_SIZE = 2000  # subsets scored per size (all of them below this; else a seeded sample)


def proxy(subset: Sequence[int], cosine: np.ndarray, norms: np.ndarray) -> float:
    """Higher is better: minus the mean pairwise cosine, minus the coefficient of variation of the norms."""
    idx = list(subset)
    pairs = [cosine[i, j] for i, j in itertools.combinations(idx, 2)]
    n = norms[idx]
    spread = float(np.std(n) / np.mean(n)) if np.mean(n) > 0 else 0.0
    return -float(np.mean(pairs)) - spread


def ranked_subsets(names: List[str], cosine, norms, sizes: Sequence[int], seed: int = 0,
                   score: Optional[Callable] = None) -> Dict[int, List[dict]]:
    """{size: [{"experts": [...], "proxy": p}, ...] best first}; ties keep the lexicographic order. ``score``
    (subset indices -> higher is better) replaces the proxy, e.g. a fitted predictor (``predictor.py``)."""
    cosine, norms = np.asarray(cosine, dtype=np.float64), np.asarray(norms, dtype=np.float64)
    score = score or (lambda c: proxy(c, cosine, norms))
    rng = np.random.default_rng(seed)
    out = {}
    for k in sizes:
        combos = list(itertools.combinations(range(len(names)), k))
        if len(combos) > MAX_PER_SIZE:
            combos = [combos[i] for i in sorted(rng.choice(len(combos), MAX_PER_SIZE, replace=False))]
        values = {c: score(c) for c in combos}
        scored = sorted(combos, key=lambda c: -values[c])
        out[k] = [{"experts": [names[i] for i in c], "proxy": values[c]} for c in scored]
    return out


def spread_order(sizes) -> List[int]:
    """Sizes in an order that covers their range early: ends first, then midpoints (2, 12, 7, 4, 10, ...)."""
    sizes = sorted(sizes)
    if len(sizes) <= 2:
        return sizes
    out, spans = [sizes[0], sizes[-1]], [(0, len(sizes) - 1)]
    while spans:
        lo, hi = spans.pop(0)
        if hi - lo > 1:
            mid = (lo + hi) // 2
            out.append(sizes[mid])
            spans += [(lo, mid), (mid, hi)]
    return out


def interleave(ranked: Dict[int, List[dict]], methods: List[str], n: int) -> List[dict]:
    """The first ``n`` candidates: rank 0 of every size (sizes in ``spread_order``) x method, then rank 1, ...;
    each {method, experts, size, rank, proxy}. No prior says which size merges best, so a small budget tries sizes
    across the whole range rather than the smallest ones only."""
    out = []
    for rank in range(max((len(v) for v in ranked.values()), default=0)):
        for size in spread_order(ranked):
            if rank < len(ranked[size]):
                for method in methods:
                    out.append({"method": method, "size": size, "rank": rank, **ranked[size][rank]})
                    if len(out) == n:
                        return out
    return out


def candidate_id(candidate: dict) -> str:
    from wildmerge.recipes.method import safe_name

    return safe_name(f"{candidate['method']}__" + "+".join(e.replace("expert_", "e") for e in candidate["experts"]))
