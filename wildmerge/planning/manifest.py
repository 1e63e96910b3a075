"""The run's manifest: the pool as resolved (hub ids pinned to commit hashes) and the subsets, written once.

Every later invocation on the same run directory reuses these subsets (so methods added later merge exactly the
same expert sets) and these revisions (so a hub repository that moved on is not silently mixed in).
"""

import csv
import io
import re
from datetime import datetime, timezone
from pathlib import Path

from wildmerge.atomic import write_text
from wildmerge.errors import ConfigError
from wildmerge.pools import resolve
from wildmerge.run import Manifest, PoolModels, RunFolder
from wildmerge.planning.preflight import check_finite
from wildmerge.planning.sampler import PREDICTOR_NOTE, domain_subsets, draw_subsets, top_subsets
from wildmerge.planning.settings import Sampling


def selection_note(select) -> str:
    """What chose the subsets, for the dry run and the manifest: a predictor, or the task-vector norm balance."""
    if (select or {}).get("rule") == "norm balance":
        return f"subsets chosen by task-vector norm balance (the k most {select['prefer']} per size: max/min norm ratio)"
    return PREDICTOR_NOTE


def draw_for(pool, sampling: Sampling, scorer=None):
    """The subsets of a pool: random draws per size, Appendix E's domain configurations (plus n = 1), or the
    best-scored subsets of a fitted predictor (``scorer``: subset names -> score)."""
    names, s = pool.expert_names, sampling
    if scorer is not None:
        return top_subsets(names, sizes=s.sizes, k=s.k, score=scorer, full=s.full, note=selection_note(s.select))
    if s.homogeneous:
        draw = domain_subsets(names, [e.domain for e in pool.experts])
        draw.subsets[:0] = draw_subsets(names, sizes=[1], k=s.k, seed=s.seed, full=False).subsets
        return draw
    return draw_subsets(names, sizes=s.sizes, k=s.k, seed=s.seed, full=s.full)


def check_same(run_dir, sampling: Sampling) -> Manifest | None:
    """The existing manifest, if any, after checking it was drawn with these settings."""
    existing = RunFolder(run_dir).read_manifest()
    diffs = sampling.differences(existing.sampling) if existing else []
    if diffs:
        raise ConfigError(
            f"{run_dir} already holds subsets drawn differently:\n  " + "\n  ".join(diffs)
            + "\nRerun with the run's settings (they are in manifest.json) to resume or add methods, "
            "or pass a new --out for a new draw."
        )
    return existing


FAMILY_FOLDER = re.compile(r"v\d+-seed\d+.*")  # an embedded family's cache key (families/cache.py)


def _family_folder(path: str) -> str | None:
    return next((p.name for p in [Path(path), *Path(path).parents] if FAMILY_FOLDER.fullmatch(p.name)), None)


def check_same_family(run_dir, recorded: PoolModels, now: PoolModels) -> None:
    """A run's models from an embedded family (``demo:`` / ``smollm2:`` references, or paths into a family's cache
    folder) must come from the family it was made with: a new builder version or other kernels make another family
    (other weights), whose merges and scores must never mix into an old run."""
    then = {m.name: _family_folder(m.path) for m in [recorded.base, *recorded.experts] if _family_folder(m.path)}
    moved = {m.name: (then[m.name], _family_folder(m.path)) for m in [now.base, *now.experts]
             if m.name in then and then[m.name] != _family_folder(m.path)}
    if moved:
        name, (old, new) = next(iter(moved.items()))
        raise ConfigError(f"{run_dir} was made with the family {old}, but {name} now resolves to {new}: another "
                          "family (other weights; a new builder version or other kernels), never mixed into an old run; "
                          "pass a new --out to run the protocol on it, or keep the old run as it is")


def pinned_commits(run_dir) -> dict:
    """{expert or "base": revision} of the run's manifest ({} before the first draw): what ``pools.resolve`` takes
    as ``pinned``, so a branch that moved upstream never mixes new weights into an old run."""
    existing = RunFolder(run_dir).read_manifest()
    if not existing:
        return {}
    return {**{m.name: m.revision for m in existing.models.experts}, "base": existing.models.base.revision}


def prepare(run_dir, pool, sampling: Sampling, *, scorer=None, allow_pickle=False, download=None,
            resolved=None) -> tuple[Manifest, PoolModels]:
    """(manifest, models resolved on this machine). Resolves and checks every model before anything is merged.

    With ``scorer`` (subset -> score; ``sampling.select`` records where it came from) the best-scored subsets are
    taken instead of random ones. ``resolved``: the pool as the command resolved it at ``pinned_commits``; else it
    is resolved here, the same way."""
    run = RunFolder(run_dir)
    existing = check_same(run_dir, sampling)
    if resolved is None:  # the manifest's commit hashes win
        resolved = resolve(pool, allow_pickle=allow_pickle, download=download, pinned=pinned_commits(run_dir))
    for name, (vocab, base_vocab) in resolved.vocab_differs.items():
        print(f"  note: {name}: vocabulary of {vocab} tokens vs base {base_vocab}; its merges keep the base's "
              "tokenizer (mergekit aligns the embeddings; RegMean / CoM read it on the base's tokens)")
    models = resolved.pool_models()
    if existing:
        check_same_family(run_dir, existing.models, models)
    check_finite(run.root, models, allow_pickle)  # before any merge: NaN in, NaN out
    if existing:
        return existing, models
    draw = draw_for(pool, sampling, scorer)
    from wildmerge import __version__

    manifest = Manifest(
        pool=pool.name, pool_file=pool.source, description=pool.description or "",
        seed=sampling.seed, sizes=sorted({s.n for s in draw.subsets}), k=sampling.k,
        combinations={str(n): c for n, c in draw.combinations.items()}, notes=draw.notes,
        subsets=[s.as_dict() for s in draw.subsets], models=models, sampling=sampling.record(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), wildmerge=__version__,
    )
    run.root.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["subset_id", "n", "experts", "exhaustive", "domain"])
    for s in draw.subsets:
        w.writerow([s.subset_id, s.n, ";".join(s.experts), s.exhaustive, s.domain or ""])
    write_text(run.subsets_csv, buf.getvalue())
    run.write_manifest(manifest)  # last: its presence means the draw is complete
    return manifest, models
