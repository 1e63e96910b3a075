"""Beyond the paper: choose subsets with the fitted pairwise predictor.

A subset's score is the **mean predicted pairwise score over its C(n, 2) pairs**: the predictor ranks pairs, and a
subset whose pairs all merge well should merge well. Each method's pair scores come from its all-pairs fit
(min-max scaling on all pairs); with no method named, each method's pair scores are z-scored over the pairs and
averaged, so one subset draw serves every method of a run.
"""

import itertools
import json
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import numpy as np

from wildmerge.analysis.mergeability import predictor as PR
from wildmerge.errors import ConfigError, WildmergeError


def pair_scores(fits: dict, metrics_df) -> Dict[str, Dict[str, float]]:
    """{method or "all": {"a__b": predicted score}} for every pair of the metrics table."""
    X = metrics_df[fits["metrics"]].to_numpy(float)
    keys = [f"{a}__{b}" for a, b in zip(metrics_df["expert_a"], metrics_df["expert_b"])]
    out, z = {}, []
    for method, r in fits["methods"].items():
        f = r["final"]
        s = PR.minmax_apply(X, np.array(f["lo"]), np.array(f["range"])) @ np.array(f["w"])
        out[method] = dict(zip(keys, s.tolist()))
        z.append((s - s.mean()) / s.std() if s.std() > 0 else np.zeros_like(s))
    out["all"] = dict(zip(keys, np.mean(z, axis=0).tolist()))
    return out


def load_scorer(predictor_path, method: Optional[str] = None) -> Callable[[Sequence[str]], float]:
    """A function from a subset (expert names) to its score, from a ``predictor.json``."""
    path = Path(predictor_path)
    path = path / "predictor.json" if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"--predictor {predictor_path}: no predictor.json; fit one with `wildmerge analyze predictor`")
    scores = json.loads(path.read_text()).get("pair_scores", {})
    key = method or "all"
    if key not in scores:
        raise ConfigError(f"predictor {path} has no pair scores for {key!r}; available: {', '.join(scores)}")
    table = {frozenset(k.split("__")): v for k, v in scores[key].items()}

    def score(subset: Sequence[str]) -> float:
        pairs = [frozenset(p) for p in itertools.combinations(subset, 2)]
        missing = [sorted(p) for p in pairs if p not in table]
        if missing:
            raise WildmergeError(f"the predictor has no score for pair(s) {missing[:3]}: its metrics were computed "
                                 f"on another pool; recompute them for this pool")
        return float(np.mean([table[p] for p in pairs])) if pairs else 0.0

    return score
