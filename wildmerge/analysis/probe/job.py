"""``wildmerge analyze probe``'s work: the fresh-head probe over the models of one or several runs (model seeds)
or of ``--model`` folders, the compositions scored by lm-eval, the tables over seeds and the partitions' geometry.

The command turns its flags into a ``ProbeJob`` and calls ``probe_job``."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from wildmerge.analysis.probe.partitions import DEFAULT_TASKS
from wildmerge.run import default_out


@dataclass(frozen=True)
class ProbeJob:
    """What ``wildmerge analyze probe`` was asked (its flags, by name)."""

    suite: str
    run: List[str] = field(default_factory=list)
    model: List[str] = field(default_factory=list)
    models: Optional[str] = None
    base: Optional[str] = None
    reference: Optional[str] = None
    seeds: List[int] = field(default_factory=lambda: [0, 1, 2])
    device: str = "cpu"
    batch_size: int = 32
    threads: int = 1
    max_memory_gib: Optional[float] = None
    composition: bool = False
    join_leaderboard: bool = False
    partitions: Optional[str] = None
    partition_tasks: int = DEFAULT_TASKS
    router: Optional[str] = None
    out: Optional[str] = None


def _run_models(args, run_dir):
    from wildmerge.analysis.probe.probe_models import ProbeModel
    from wildmerge.run import RunFolder

    plan = RunFolder(run_dir).read_plan()
    wanted = set(args.models.split(",")) if args.models else None
    if wanted:
        unknown = sorted(wanted - {e.model_id for e in plan.entries})
        if unknown:
            from wildmerge.errors import ConfigError

            raise ConfigError(f"--models: not in {RunFolder(run_dir).plan_path}: {unknown}")
    return [ProbeModel(e.model_id, e.path, e.kind, e.method or "", e.n) for e in plan.entries
            if wanted is None or e.model_id in wanted]


def _full_model(ref: str, base_ref: str | None) -> str:
    """The folder of ``ref`` as a whole checkpoint: a LoRA adapter is folded into its base first (cached), as the
    sampler does; an adapter whose base cannot be found locally is refused with the fix."""
    from wildmerge.errors import ConfigError, WildmergeError
    from wildmerge.hub import resolve_path
    from wildmerge.pools.adapters import declared_base, full_checkpoints, is_adapter

    path = resolve_path(ref, download=False)
    if not is_adapter(path):
        return path
    declared = declared_base(path)
    if not (base_ref or declared):
        raise ConfigError(f"--model {ref} is a LoRA adapter that names no base; give it with --base")
    try:
        base = resolve_path(base_ref or declared, download=False)
    except WildmergeError as exc:  # not on disk, not in the hub cache
        where = f"--base {base_ref}" if base_ref else f"its base {declared!r} (adapter_config.json)"
        raise ConfigError(f"--model {ref} is a LoRA adapter; {where} is not on this machine ({exc}); give a local "
                          f"base with --base (the SmolLM2 family: --base smollm2:base)") from None
    return full_checkpoints(base, {ref: path})[ref]


def _composition_rows(args, run_dir, suite, models, tasks) -> list:
    """N of every composition (lm-eval's acc on the test split); a composition has no single feature to probe."""
    from wildmerge.analysis.probe.probe_models import row_for
    from wildmerge.eval.evaluate import evaluate_run
    from wildmerge.eval.store import OK, ResultStore
    from wildmerge.run import RunFolder

    ids = [m.model_id for m in models if m.kind == "composition"]
    if not ids:
        return []
    evaluate_run(run_dir, suite, model_ids=ids)
    store = ResultStore(RunFolder(run_dir).eval_dir(suite.name))
    index, rows = store.index().models, []
    for m in (m for m in models if m.kind == "composition"):
        record = store.load(index.get(m.model_id, ""))
        for name, task in tasks.items():
            row = row_for(m, task, None, None, args.seeds, "a composition keeps T models: no single feature to probe")
            if record["status"] == OK and task.label in record.get("scores", {}):
                row["native"] = float(record["scores"][task.label])
                row["readout"] = "composition"
            rows.append(row)
    return rows


def probe_job(args: ProbeJob) -> int:
    """The probe of every model asked for, its tables written; 0 (errors raise). Runs on ``args.threads`` torch
    threads, the caller's count back after."""
    from wildmerge.threads import torch_threads

    with torch_threads(max(1, args.threads)):
        return _probe_job(args)


def _probe_job(args: ProbeJob) -> int:
    from wildmerge.analysis.probe.data import load_probe_tasks
    from wildmerge.analysis.probe.partitions import parse_partitions
    from wildmerge.errors import ConfigError
    from wildmerge.eval.suites import load_suite
    from wildmerge.hub import resolve_path

    if bool(args.run) == bool(args.model):
        raise ConfigError("give run folder(s) or --model PATH (one or the other)")
    if not args.seeds:
        raise ConfigError("--seeds needs at least one seed")
    if len(set(args.run)) < len(args.run):
        raise ConfigError("a run folder is given twice: each run is one model seed")
    partitions = parse_partitions(args.partitions) if args.partitions is not None else []
    from wildmerge.resources import checked_device

    checked_device(args.device, "--device")  # a missing GPU said before any model is read
    suite = load_suite(args.suite)
    tasks, skipped = load_probe_tasks(suite)
    for name, why in skipped.items():
        print(f"task {name}: not probed: {why}")
    if not tasks:
        raise ConfigError(f"suite {suite.name!r} has no task the probe can use (train / validation / test splits and "
                          f"one fixed label set); see the reasons above")
    reference = resolve_path(args.reference, download=False) if args.reference else None
    if reference is None:
        print("no --reference: R and U are left missing (demo family: --reference demo:joint)")
    router = resolve_path(args.router, download=False) if args.router else None
    if not args.run:
        from wildmerge.analysis.probe.probe_models import ProbeModel

        models = [ProbeModel(ref, _full_model(ref, args.base)) for ref in args.model]
        out = Path(args.out or default_out("probe", suite=suite.name))
        _probe(args, None, models, out, suite, tasks, skipped, reference, partitions, router or models[0].path)
        return 0
    for run_dir in args.run:  # every run's plan and --models checked before any model is read
        _run_models(args, run_dir)
    several = len(args.run) > 1
    per_run, geometry = [], []
    for run_dir in args.run:
        out = Path(_probe_dir(run_dir, suite.name) if several or not args.out else args.out)
        rows, geo = _probe(args, run_dir, None, out, suite, tasks, skipped, reference, partitions, router)
        per_run.append(rows)
        geometry.append(geo)
    if several:
        from wildmerge.analysis.probe.seeds import aggregate_geometry, aggregate_probe, write_geometry, write_seeds

        out = Path(args.out or default_out("probe", suite=suite.name))
        paths = write_seeds(aggregate_probe(per_run), out, args.run)
        if partitions:
            paths += write_geometry(aggregate_geometry(geometry), out, f"{len(args.run)} subset draws (runs)",
                                    {"runs": list(args.run), "partitions": partitions,
                                     "partition_tasks": args.partition_tasks})
        for path in paths:
            print(f"wrote {path}")
    return 0


def _probe_dir(run_dir, suite: str) -> Path:
    """RUN/probe/<suite>: where one run's own tables go."""
    from wildmerge.run import RunFolder

    return RunFolder(run_dir).probe_dir(suite)


def _probe(args, run_dir, models, out: Path, suite, tasks, skipped, reference, partitions, router):
    """The probe of one run (or of --model models): its tables in ``out``; returns (probe rows, geometry rows)."""
    from wildmerge.analysis.probe.probe_models import run_probe, write_outputs
    from wildmerge.checkpoints import check_weights

    if run_dir:
        if args.composition:
            from wildmerge.eval.composition import add_compositions

            add_compositions(run_dir, device=args.device)  # centroids from each expert's data: (expert_data)
        models = _run_models(args, run_dir)
        if router is None:
            from wildmerge.run import RunFolder

            router = next(e.path for e in RunFolder(run_dir).read_plan().entries if e.kind == "base")
    probed = [m for m in models if m.kind != "composition"]
    check_weights({m.model_id: m.path for m in probed} | ({"reference": reference} if reference else {}))  # NaN / Inf
    rows = run_probe(probed, tasks, skipped, out / "features", reference=reference, seeds=args.seeds,
                     device=args.device, batch_size=args.batch_size, max_memory_gib=args.max_memory_gib)
    if run_dir and any(m.kind == "composition" for m in models):
        write_outputs(rows, out, args.seeds, reference)  # the probe's table first: the compositions' lm-eval jobs take longer
        rows += _composition_rows(args, run_dir, suite, models, tasks)
    for path in write_outputs(rows, out, args.seeds, reference):
        print(f"wrote {path}")
    geometry = []
    if partitions:
        from wildmerge.analysis.probe.geometry import geometry_rows
        from wildmerge.analysis.probe.seeds import write_geometry

        geometry = geometry_rows(probed, tasks, router, partitions, args.partition_tasks, out / "features",
                                 seeds=args.seeds, device=args.device, batch_size=args.batch_size,
                                 max_memory_gib=args.max_memory_gib)
        meta = {"router": router, "partitions": partitions, "partition_tasks": args.partition_tasks,
                "head_seeds": list(args.seeds)}
        for path in write_geometry(geometry, out, f"head seeds {list(args.seeds)}", meta):
            print(f"wrote {path}")
    if run_dir and args.join_leaderboard:
        print(f"wrote {_join_leaderboard(run_dir, suite.name, rows)}")
    return rows, geometry


def _join_leaderboard(run_dir, suite: str, rows) -> Path:
    """The run's score table for ``suite`` with N / FH / R columns per task (opt-in)."""
    import pandas as pd

    from wildmerge.analysis.report.scores import collect_scores
    from wildmerge.atomic import write_text
    from wildmerge.run import RunFolder

    df, _, _ = collect_scores(run_dir, suite)
    probe = pd.DataFrame(rows)
    for col in ("native", "fresh_head_mean", "recovered_ratio_of_means"):
        if col not in probe:
            probe[col] = float("nan")
    wide = probe.pivot_table(index="model_id", columns="task", values=["native", "fresh_head_mean",
                                                                       "recovered_ratio_of_means"], aggfunc="first", dropna=False)
    wide.columns = [f"probe_{v}_{t}".replace("fresh_head_mean", "fh").replace("recovered_ratio_of_means", "R")
                    for v, t in wide.columns]
    joined = df.merge(wide, left_on="model_id", right_index=True, how="left")
    return write_text(RunFolder(run_dir).report_dir() / "leaderboard_probe.csv", joined.to_csv(index=False))
