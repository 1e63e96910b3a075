"""``wildmerge analyze mergeability``'s work: the pool of a run's manifest (``--run``) or a pool resolved once
(``--pool``), each expert's data checked for the metric groups asked for, then the 28 pairwise metrics written.

The command turns its flags into a ``MetricsJob`` and calls ``pool_metrics``."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from wildmerge.errors import ConfigError
from wildmerge.run import default_out


@dataclass(frozen=True)
class MetricsJob:
    """What ``wildmerge analyze mergeability`` was asked (its flags, by name)."""

    pool: Optional[str] = None
    run: Optional[str] = None
    exclude: List[List[str]] = field(default_factory=list)
    groups: List[str] = field(default_factory=lambda: ["weights", "activations", "gradients"])
    out: Optional[str] = None
    cache: Optional[str] = None
    device: str = "cpu"
    k: int = 10
    subspace_scope: str = "blocks"
    n_own: int = 10
    n_pooled: int = 10
    max_len: int = 64
    seed: int = 42
    allow_pickle: bool = False


def pool_models(args):
    """(pool name, base path, {expert: path}, {expert: calibration spec}) from --run or --pool, all resolved."""
    from wildmerge.checkpoints import check_compatible, check_weights
    from wildmerge.expert_data.schema import parse_data

    excluded = {n for group in args.exclude for n in group}
    if args.run:
        from wildmerge.run import RunFolder

        manifest = RunFolder(args.run).read_manifest()
        if manifest is None:
            raise ConfigError(f"{args.run} has no manifest.json; is it a run folder written by `wildmerge sample`?")
        models = [m for m in manifest.models.experts if m.name not in excluded]
        name, base = manifest.pool, manifest.models.base.path
        experts = {m.name: m.path for m in models}
        specs = {m.name: parse_data(m.calibration, f"data of {m.name!r}") for m in models}
        _require_data(specs, args.groups, name)
        check_compatible(base, experts, allow_pickle=args.allow_pickle)  # added tokens: read on the base's tokens
        check_weights({"base": base, **experts}, allow_pickle=args.allow_pickle)  # NaN / Inf, truncation, shards
        return name, base, experts, specs
    from wildmerge.pools import load_pool, resolve

    pool = load_pool(args.pool or "demo", sorted(excluded))
    _require_data(pool.all_data(), args.groups, pool.name)  # before any model is resolved
    resolved = resolve(pool, allow_pickle=args.allow_pickle)  # adapters folded, as for a merge
    resolved.check_weights()  # NaN / Inf, truncation, shards
    return pool.name, resolved.base_path, resolved.experts, resolved.data  # data: one contract, expert_data


def _require_data(data: dict, groups, pool_name: str) -> None:
    """The pre-flight of the metric groups asked for; experts with unlabelled text only get the advice that fits
    them (the gradient metrics need labelled items; the other groups run on text)."""
    from wildmerge.expert_data.check import has, line_to_add, require_data

    text_only = [n for n, d in data.items() if not has(d, "labelled") and has(d, "text")]
    if "gradients" in groups and text_only and all(has(d, "text") for d in data.values()):
        raise ConfigError(f"the gradient metrics need labelled data (prompt / answer items), and expert(s) "
                          f"{', '.join(text_only)} of pool {pool_name!r} have unlabelled text only: run the other "
                          f"groups with --groups weights,activations, or add under each: {line_to_add('labelled')}"
                          + ("" if len(text_only) == len(data) else " (or leave them out with --exclude NAME)"))
    require_data(data, _features(groups), pool_name)


def _describe(data) -> str:
    if data is None:
        return "none"
    return "; ".join(f"{part}: {s.describe()}" for part, s in (("text", data.text), ("labelled", data.labelled)) if s)


def _features(groups) -> list:
    return [f for g, f in (("activations", "activation metrics"), ("gradients", "gradient metrics")) if g in groups]


def pool_metrics(args: MetricsJob) -> int:
    """The metrics of every pair of the pool's experts, written under ``args.out``; 0 (errors raise)."""
    from wildmerge.analysis.mergeability.compute import MetricSettings, compute_metrics
    from wildmerge.analysis.mergeability.data import DataSettings, read_items
    from wildmerge.analysis.mergeability.io import write_metrics
    from wildmerge.analysis.mergeability.weights import WeightSettings

    from wildmerge.resources import checked_device

    bad = sorted(set(args.groups) - {"weights", "activations", "gradients"})
    if bad or not args.groups:
        raise ConfigError(f"--groups {bad or args.groups}: choose from weights, activations, gradients")
    checked_device(args.device, "--device")  # a missing GPU said before any model is read
    settings = MetricSettings(
        groups=args.groups, device=args.device,
        weights=WeightSettings(k=args.k, subspace_scope=args.subspace_scope, device=args.device),
        data=DataSettings(n_own=args.n_own, n_pooled=args.n_pooled, max_len=args.max_len, seed=args.seed))
    name, base, experts, specs = pool_models(args)
    calibration = {}
    out = Path(args.out or default_out("mergeability", pool=name))
    if {"activations", "gradients"} & set(args.groups):
        calibration = {e: read_items(e, specs.get(e), model_path=path, generated_dir=out / "calibration")
                       for e, path in experts.items()}
    df, side = compute_metrics(base, experts, calibration, settings, cache_dir=args.cache or str(out / "cache"))
    side.update(pool=name, base=base, calibration={e: _describe(specs.get(e)) for e in experts})
    for path in write_metrics(df, side, out):
        print(f"wrote {path}")
    for note in _notes(side):
        print(f"note: {note}")
    return 0


def _notes(side: dict) -> list:
    notes = [f"metric {m} is NaN for some pair (recorded; the predictor leaves it out)" for m in side["nan_metrics"]]
    notes += [f"metric {m} is constant over the pairs (recorded; no predictive signal)" for m in side["constant_metrics"]]
    return notes
