"""``wildmerge analyze geometry --pool NAME``: how the experts' task vectors relate, before merging anything."""

import argparse
from pathlib import Path


HELP = "pairwise cosine similarity of task vectors, per model and per layer"
DESCRIPTION = ("Pairwise cosine similarity of the experts' task vectors (whole model) and, per pair, the number of "
               "layers with positive / negative cosine (Hitit et al., arXiv 2511.21437, Figs. 19-26).")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", default="demo", help="pool name or YAML path (default: demo)")
    p.add_argument("--exclude", action="append", default=[], help="leave this expert out (repeatable)")
    p.add_argument("--out", help="output folder (default: runs/analysis-<pool>/geometry)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="a layer whose |cosine| is at most this counts as neither positive nor negative "
                        "(default 1e-6)")
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle-only checkpoints")


def run(args) -> int:
    from wildmerge.analysis.pool.geometry import ZERO_COSINE_TOLERANCE, task_vector_geometry, write_geometry
    from wildmerge.checkpoints import check_compatible, check_weights
    from wildmerge.hub import resolve_all
    from wildmerge.sampling.adapters import full_checkpoints
    from wildmerge.sampling.pools import load_pool

    tolerance = ZERO_COSINE_TOLERANCE if args.tolerance is None else args.tolerance
    if not 0 <= tolerance < 1:
        from wildmerge.errors import ConfigError

        raise ConfigError(f"--tolerance must be in [0, 1) (a cosine), got {tolerance}")
    pool = load_pool(args.pool)
    if args.exclude:
        pool = pool.without(args.exclude)
    relative_to = Path(pool.source).parent if pool.source else None
    refs = [("base", pool.base.model, pool.base.revision)]
    refs += [(e.label, e.model, e.revision) for e in pool.experts]
    resolved = resolve_all(refs, relative_to=relative_to, allow_pickle=args.allow_pickle)
    base, experts = resolved[0].path, {label: r.path for (label, _, _), r in zip(refs[1:], resolved[1:])}
    experts = full_checkpoints(base, experts)  # LoRA adapters: folded into the base, as for a merge
    check_compatible(base, experts, allow_pickle=args.allow_pickle)  # added tokens: read on the base's tokens
    check_weights({"base": base, **experts}, allow_pickle=args.allow_pickle)  # NaN / Inf, truncation, shards
    result = task_vector_geometry(base, experts, tolerance=tolerance)
    out = Path(args.out or Path("runs") / f"analysis-{pool.name}" / "geometry")
    for path in write_geometry(result, out):
        print(f"wrote {path}")
    return 0
