"""Whom TIES's sign election follows (the reality-check paper, Sec. 4.3: the elected sign is the sign of the sum of
the trimmed task vectors, so a pool with one large-norm expert follows that expert).

TIES (Yadav et al. 2023, as mergekit's ``ties``): each task vector keeps its top ``density`` entries by magnitude
per tensor, ``tau_hat_t``; the elected sign is ``gamma = sign(sum_t tau_hat_t)``; only entries agreeing with
``gamma`` are merged. Per expert, over the whole model:

- ``agree_share``: of its kept entries, the share whose sign is the elected one;
- ``mass_share``: its share of the merged mass, ``sum |tau_hat_t| [agrees] / sum_s sum |tau_hat_s| [agrees]``;
- ``decisive_share``: of all entries with an elected sign, the share where leaving this expert out would change
  the sign (it alone decides them).

A balanced pool gives every expert about ``1/T`` of the mass; an imbalanced one gives the large expert most of the
mass and most of the decisive entries. One tensor of every model in memory at a time (``stream_task_vectors``).
"""

from typing import Dict, List

import numpy as np

from wildmerge.analysis.pool.geometry import stream_task_vectors


def trimmed(taus, density: float):
    """Each row's top ``density`` share of entries by magnitude (``int(density * numel)``, at least one), rest 0."""
    import torch

    if density >= 1.0:
        return taus
    k = max(1, int(density * taus.shape[1]))
    keep = torch.zeros_like(taus, dtype=torch.bool)
    keep.scatter_(1, taus.abs().topk(k, dim=1).indices, True)
    return taus * keep


def election_counts(taus) -> Dict[str, np.ndarray]:
    """Per-expert sums for one tensor's trimmed task vectors ``[T, numel]``."""
    import torch

    total = taus.sum(0)
    gamma = torch.sign(total)
    agrees = (torch.sign(taus) == gamma) & (taus != 0) & (gamma != 0)
    without = torch.sign(total.unsqueeze(0) - taus)
    decisive = (without != gamma) & (gamma != 0)
    return {"kept": (taus != 0).sum(1).numpy().astype(np.float64),
            "agree": agrees.sum(1).numpy().astype(np.float64),
            "mass": (taus.abs() * agrees).sum(1).numpy(),
            "decisive": decisive.sum(1).numpy().astype(np.float64),
            "elected": np.float64((gamma != 0).sum()),
            "sq": (taus ** 2).sum(1).numpy()}


def sign_election(base: str, experts: Dict[str, str], density: float = 1.0, progress: bool = True) -> List[dict]:
    """One row per expert: its task-vector norm (after trimming) and its shares of TIES's sign election."""
    names = list(experts)
    acc: Dict[str, np.ndarray] = {}
    for _, taus in stream_task_vectors(base, [experts[n] for n in names], "TIES sign election", progress):
        for key, value in election_counts(trimmed(taus, density)).items():
            acc[key] = acc.get(key, 0) + value
    if not acc:
        return []
    mass = acc["mass"].sum()
    return [{"expert": n, "density": density, "norm": float(np.sqrt(acc["sq"][i])),
             "agree_share": float(acc["agree"][i] / acc["kept"][i]) if acc["kept"][i] else 0.0,
             "mass_share": float(acc["mass"][i] / mass) if mass else 0.0,
             "decisive_share": float(acc["decisive"][i] / acc["elected"]) if acc["elected"] else 0.0}
            for i, n in enumerate(names)]
