"""A pool resolved on this machine: the one place where a pool's references become checkpoint folders.

Every reader of a pool (the sampler's manifest, the guided search, the TAS sweep and AdaMerging, the norm-balance
selection, ``wildmerge tune`` and the ``analyze`` commands) calls ``resolve``, so all of them see the same experts:
hub ids at a pinned commit, LoRA adapters folded into the base (``adapters.py``), vocabularies checked once (an
expert with added tokens is listed in ``vocab_differs``; merges and readers hold it on the base's tokens) and each
expert's data with its local files made absolute.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from wildmerge.expert_data.schema import ExpertData
from wildmerge.hub import ResolvedModel
from wildmerge.pools.schema import Pool, ProtocolDefaults, load_pool


@dataclass(frozen=True)
class ResolvedPool:
    pool: Pool  # as loaded, the excluded experts left out
    base: ResolvedModel  # named "base"; a hub base at its commit hash
    published: Dict[str, ResolvedModel]  # each expert as resolved (an adapter: its own folder), pool order
    experts: Dict[str, str]  # expert -> a full checkpoint folder (an adapter: folded into the base)
    adapters: Dict[str, str]  # expert -> its adapter folder, for the experts published as adapters
    vocab_differs: Dict[str, Tuple[int, int]]  # expert -> (its vocabulary size, the base's): added tokens
    data: Dict[str, Optional[ExpertData]]  # expert -> its data (the pool default filled in), local files absolute
    allow_pickle: bool = False

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def source(self) -> Optional[str]:
        return self.pool.source

    @property
    def folder(self) -> Optional[Path]:
        return self.pool.folder

    @property
    def protocol(self) -> ProtocolDefaults:
        return self.pool.protocol

    @property
    def base_path(self) -> str:
        return self.base.path

    @property
    def expert_names(self) -> List[str]:
        return list(self.experts)

    def check_weights(self) -> None:
        """Every checkpoint complete and free of NaN / Inf (``checkpoints.check_weights``), before any read."""
        from wildmerge.checkpoints import check_weights

        check_weights({"base": self.base_path, **self.experts}, allow_pickle=self.allow_pickle)

    def pool_models(self):
        """The run manifest's ``models`` record: every model as resolved, an expert at its full checkpoint (with
        ``adapter`` where it was folded from one), its domain and its data."""
        from wildmerge.expert_data.recipe import to_record
        from wildmerge.run import PoolModels

        experts = []
        for e in self.pool.experts:
            extra = {"adapter": self.adapters[e.label]} if e.label in self.adapters else {}
            experts.append(self.published[e.label].model_copy(update={
                "name": e.label, "domain": e.domain, "path": self.experts[e.label], **extra,
                "calibration": to_record(self.data[e.label])}))
        return PoolModels(base=self.base.model_copy(update={"name": "base"}), experts=experts)


def check_local(pool: Pool, allow_pickle: bool = False) -> None:
    """What ``resolve`` checks of the pool's local checkpoint folders, for a dry run, which downloads and builds
    nothing: each local reference resolved (``hub.resolve_all``'s one error) and each local checkpoint readable and
    mergeable with a local base tensor by tensor (``checkpoints.check_compatible``: config.json, weight headers).
    Hub and family models, and adapters (a real run folds them into the base), are checked by the real run."""
    from wildmerge.checkpoints import check_compatible
    from wildmerge.hub import Unresolvable, classify, resolve_all
    from wildmerge.pools.adapters import is_adapter

    refs = [("base", pool.base.model, pool.base.revision)] + [(e.label, e.model, e.revision) for e in pool.experts]
    local = []
    for ref in refs:
        try:
            kind, _ = classify(ref[1], pool.folder)
        except Unresolvable:
            continue  # neither a folder nor a hub id: the real run's resolve says so (a dry run plans hub pools)
        if kind == "local":
            local.append(ref)
    folders = {r.name: r.path for r in resolve_all(local, relative_to=pool.folder, allow_pickle=allow_pickle,
                                                   download=False)
               if not is_adapter(r.path)}
    base = folders.pop("base", None)
    if base is not None:
        check_compatible(base, folders, allow_pickle)
    else:  # a hub or family base: each local expert's own checkpoint read
        for name, folder in folders.items():
            check_compatible(folder, {}, allow_pickle, base_name=name)


def resolve(pool, *, exclude=(), allow_pickle: bool = False, download=None,
            pinned: Optional[Dict[str, Optional[str]]] = None) -> ResolvedPool:
    """``pool`` (a loaded ``Pool``, a shipped name or a YAML path) minus ``exclude``, resolved and checked.

    ``pinned`` ({expert or "base": revision}, a run manifest's commits) wins over the pool's revisions, so a hub
    branch that moved upstream is not mixed into an old run. ``download``: as ``hub.resolve``. Raises one error
    naming every model that cannot be resolved or merged with the base tensor by tensor."""
    from wildmerge.checkpoints import check_compatible
    from wildmerge.expert_data.recipe import absolute
    from wildmerge.hub import resolve_all
    from wildmerge.pools.adapters import full_checkpoints

    if not isinstance(pool, Pool):
        pool = load_pool(pool, exclude)
    elif exclude:
        pool = pool.without(list(exclude))
    pinned = pinned or {}
    refs = [("base", pool.base.model, pinned.get("base") or pool.base.revision)]
    refs += [(e.label, e.model, pinned.get(e.label) or e.revision) for e in pool.experts]
    base, *experts = resolve_all(refs, relative_to=pool.folder, allow_pickle=allow_pickle, download=download)
    published = {r.name: r for r in experts}
    paths = full_checkpoints(base.path, {name: r.path for name, r in published.items()})  # LoRA adapters folded
    adapters = {name: r.path for name, r in published.items() if paths[name] != r.path}
    vocab_differs = check_compatible(base.path, paths, allow_pickle)
    data = {name: absolute(d, pool.folder) for name, d in pool.all_data().items()}  # expert_data/recipe.py
    return ResolvedPool(pool=pool, base=base, published=published, experts=paths, adapters=adapters,
                        vocab_differs=vocab_differs, data=data, allow_pickle=allow_pickle)
