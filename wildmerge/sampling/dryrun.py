"""``--dry-run``: the plan and its cost (merges, disk) without resolving weights or writing anything."""

from collections import Counter
from pathlib import Path

from wildmerge.run import PoolModels, ResolvedModel, SubsetRecord, read_merge_info
from wildmerge.sampling.manifest import check_same, draw_for

BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _one_model_bytes(pool, methods) -> int | None:
    """Size of one merged model from the base's tensor headers, when the base is on this machine."""
    from wildmerge.checkpoints import param_count, read_config
    from wildmerge.hub import FAMILY_PREFIXES, resolve
    from wildmerge.errors import WildmergeError

    if pool.base.model.startswith(FAMILY_PREFIXES):
        return None  # resolving would build the family; a dry run stays instant
    try:
        base = resolve(pool.base.model, pool.base.revision, download=False,
                       relative_to=Path(pool.source).parent if pool.source else None).path
        params = param_count(base)
    except WildmergeError:  # a dry run never fails on a missing or unreadable base
        return None
    dtypes = [m.recipe.get("out_dtype") or read_config(base).get("dtype") or "bfloat16" for m in methods.values()]
    return params * max(BYTES.get(str(d), 2) for d in dtypes)


def _unresolved(name, ref, domain=None) -> ResolvedModel:
    """A pool model as written in the pool: a dry run resolves nothing."""
    return ResolvedModel(name=name, model=ref, kind="unresolved", path=ref, domain=domain)


def print_dry_run(run_dir, pool, sampling, methods, sweeps, keep_models: str = "all", scorer=None,
                  tune: bool = False) -> int:
    from wildmerge.sampling.plan import build_entries
    from wildmerge.sampling.preflight import missing_expert_data

    existing = check_same(run_dir, sampling)
    draw = None if existing else draw_for(pool, sampling, scorer)
    subsets = existing.subsets if existing else [SubsetRecord(**s.as_dict()) for s in draw.subsets]
    notes = existing.notes if existing else draw.notes
    models = PoolModels(base=_unresolved("base", pool.base.model),
                        experts=[_unresolved(e.label, e.model, e.domain) for e in pool.experts])
    entries = build_entries(run_dir, subsets, models, methods, sweeps)
    merges = [e for e in entries if e.kind == "merge"]
    done = sum(1 for e in merges if read_merge_info(e.path) is not None)
    print(f"dry run: pool {pool.name!r} ({len(pool.experts)} experts), run directory {run_dir}")
    print(f"  subsets: {len(subsets)} ({', '.join(f'n={n}: {c}' for n, c in Counter(s.n for s in subsets).items())})")
    for note in notes:
        print(f"  note: {note}")
    print(f"  merges: {len(merges)} ({done} already done); per method: "
          + ", ".join(f"{m} {c}" for m, c in Counter(e.method for e in merges).items()))
    size = _one_model_bytes(pool, methods)
    todo = len(merges) - done
    if size is None:
        print("  disk: unknown (the base is not on this machine yet, or is an embedded family (demo:, smollm2:), built "
              "on first use)")
    else:
        need = size * (min(todo, 1) if keep_models == "none" else todo)
        print(f"  disk: {size / 1e9:.3g} GB per merged model, {need / 1e9:.3g} GB needed for the merges to do "
              f"(--keep-models {keep_models})")
    print(f"  models evaluated: {len(entries)} (base, {len(pool.experts)} experts, {len(merges)} merges)")
    missing = missing_expert_data(pool, methods, sweeps, tune)  # said before the plan: a real run stops on it
    for line in missing:
        print(f"  MISSING DATA: {line}")
    if missing:
        print(f"  (a real run stops here: add the data to {pool.source or 'the pool file'}, or --exclude those experts)")
    print("  plan:")
    for e in merges:
        print(f"    {e.model_id:<40} n={e.n:<3} {', '.join(e.experts)}")
    return 0
