"""The plan: which models a run has, as data. Base, every expert alone, and subsets x methods x hyperparameters.

A merge's ``model_id`` depends only on its method, its subset and the hyperparameters that differ from the method
recipe, so a sweep point equal to the main setting is the same model, and a rerun finds the same folders.
"""

from pathlib import Path
from typing import Dict, List

from wildmerge.errors import ConfigError
from wildmerge.recipes.method import check_hparams, default_hparams, merge_id, safe_name
from wildmerge.run import PlanEntry, PoolModels, RunFolder, SubsetRecord


def build_entries(run_dir: Path, subsets: List[SubsetRecord], models: PoolModels, methods: dict,
                  sweeps: dict) -> List[PlanEntry]:
    """Plan entries in a stable order: base, experts, main merges (method-major), sweep points.

    ``models`` is the pool as resolved on this machine (a dry run passes the references unresolved); ``sweeps``
    are ``recipes.sweeps.Sweep`` objects, each with its method's recipe. A merge records the sweeps it is a point
    of in ``ablations`` (the run folder's name for them).
    """
    run = RunFolder(run_dir)
    entries = [PlanEntry(model_id="base", kind="base", label="base", n=0, path=models.base.path)]
    alone = {s.experts[0]: s.subset_id for s in subsets if s.n == 1}
    for e in models.experts:
        entries.append(PlanEntry(model_id=f"expert__{safe_name(e.name)}", kind="expert", label=e.name, n=1,
                                 subset_id=alone.get(e.name), experts=[e.name], path=e.path, domain=e.domain))
    merges: Dict[str, PlanEntry] = {}

    def add(method, subset: SubsetRecord, overrides, sweep=None):
        check_hparams(method, overrides)
        defaults = default_hparams(method)
        changed = {k: v for k, v in overrides.items() if defaults.get(k) != v}
        mid = merge_id(method.name, subset.subset_id, changed)
        if mid not in merges:
            merges[mid] = PlanEntry(model_id=mid, kind="merge", method=method.name, label=method.label, n=subset.n,
                                    subset_id=subset.subset_id, hparams={**defaults, **overrides},
                                    overrides=changed, experts=list(subset.experts),
                                    path=str(run.model_dir(mid)), domain=subset.domain)
        if sweep and sweep not in merges[mid].ablations:
            merges[mid].ablations.append(sweep)

    for method in methods.values():
        for s in subsets:
            if s.n >= max(2, method.min_experts):
                add(method, s, {})
    if sweeps:
        full = [s for s in subsets if s.n == len(models.experts)]
        if not full:
            raise ConfigError("sweeps merge the full pool, but this run has no n = N subset")
        for name, sweep in sweeps.items():
            for point in sweep.points():
                add(sweep.recipe, full[0], point, sweep=name)
    return entries + list(merges.values())
