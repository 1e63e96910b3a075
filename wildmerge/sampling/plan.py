"""The plan: which models a run has, as data. Base, every expert alone, and subsets x methods x hyperparameters.

A merge's ``model_id`` depends only on its method, its subset and the hyperparameters that differ from the method
recipe, so an ablation point equal to the main setting is the same model, and a rerun finds the same folders.
"""

from pathlib import Path
from typing import Dict, List

from wildmerge.errors import ConfigError
from wildmerge.plugins.recipes import default_hparams, load_methods, merge_id, safe_name, split_hparams
from wildmerge.run import PlanEntry, PoolModels, RunFolder, SubsetRecord


def build_entries(run_dir: Path, subsets: List[SubsetRecord], models: PoolModels, methods: dict,
                  grids: dict) -> List[PlanEntry]:
    """Plan entries in a stable order: base, experts, main merges (method-major), ablation points.

    ``models`` is the pool as resolved on this machine (a dry run passes the references unresolved).
    """
    run = RunFolder(run_dir)
    entries = [PlanEntry(model_id="base", kind="base", label="base", n=0, path=models.base.path)]
    alone = {s.experts[0]: s.subset_id for s in subsets if s.n == 1}
    for e in models.experts:
        entries.append(PlanEntry(model_id=f"expert__{safe_name(e.name)}", kind="expert", label=e.name, n=1,
                                 subset_id=alone.get(e.name), experts=[e.name], path=e.path, domain=e.domain))
    merges: Dict[str, PlanEntry] = {}

    def add(method, subset: SubsetRecord, overrides, ablation=None):
        split_hparams(method, overrides)  # validates the keys
        changed = {k: v for k, v in overrides.items() if default_hparams(method).get(k) != v}
        mid = merge_id(method.name, subset.subset_id, changed)
        if mid not in merges:
            merges[mid] = PlanEntry(model_id=mid, kind="merge", method=method.name, label=method.label, n=subset.n,
                                    subset_id=subset.subset_id, hparams={**default_hparams(method), **overrides},
                                    overrides=changed, experts=list(subset.experts),
                                    path=str(run.model_dir(mid)), domain=subset.domain)
        if ablation and ablation not in merges[mid].ablations:
            merges[mid].ablations.append(ablation)

    for method in methods.values():
        for s in subsets:
            if s.n >= max(2, method.min_experts):
                add(method, s, {})
    if grids:
        full = [s for s in subsets if s.n == len(models.experts)]
        if not full:
            raise ConfigError("ablations merge the full pool, but this run has no n = N subset")
        for name, grid in grids.items():
            method = load_methods([grid.method])[grid.method]
            for point in grid.points():
                add(method, full[0], point, ablation=name)
    return entries + list(merges.values())
