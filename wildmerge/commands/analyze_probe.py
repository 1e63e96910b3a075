"""``wildmerge analyze probe RUN [RUN ...] --suite S``: the fresh-head probe of the fresh-head probe paper on every model
of a run; several runs (model seeds) are also aggregated, and ``--partitions`` adds the geometry boundary."""

import argparse
from pathlib import Path

from wildmerge.analysis.probe.partitions import DEFAULT_TASKS
from wildmerge.commands.options import comma_ints, device, int_at_least, positive_float, positive_int

HELP = "fresh-head probe: native vs a new linear head on frozen features (is the knowledge still there?)"
DESCRIPTION = ("For every model of a run (or --model), on the suite's tasks with train / validation / test splits and "
               "a fixed label set: native accuracy N, fresh-head accuracy FH (AdamW 1e-3, wd 1e-4, batch 64, 10 "
               "epochs, best validation epoch), FH - N and, with --reference J, R = (FH - N) / (J - N) and U = J - FH "
               "(the fresh-head probe paper, 'A Fresh-Head Probe for Parameter-Space Model Merging'). --composition adds the "
               "ensemble and the centroid-routed composer of every subset as lm-eval-scored baselines. Several runs "
               "(model seeds: runs sampled with different --seed) add mean ± SD over them (Tables 5-6); "
               "--partitions ward,random:100 adds the composer-minus-ensemble table over class partitions "
               "(Tables 2 and 7, Fig. 2).")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="*", help="run folder(s), one per model seed (omit with --model)")
    p.add_argument("--suite", required=True, help="suite name or YAML (demo family: demo_probe)")
    p.add_argument("--model", action="append", default=[], help="probe this model instead of a run (repeatable)")
    p.add_argument("--models", help="comma-separated model ids of the run to probe (default: all)")
    p.add_argument("--base", help="with --model: the base a LoRA adapter among them is folded into (default: the base "
                                  "its adapter_config.json names, where that resolves locally)")
    p.add_argument("--reference", help="joint reference model J for R and U (demo family: demo:joint)")
    p.add_argument("--seeds", type=comma_ints, default=[0, 1, 2], help="fresh-head seeds (default 0,1,2)")
    p.add_argument("--device", default="cpu", type=device, help="device for the frozen models (cpu, cuda, cuda:1)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--threads", type=positive_int,
                   default=1, help="CPU threads for torch (default 1: on a shared CPU more "
                                                          "threads mostly spin)")
    p.add_argument("--max-memory-gib", type=positive_float,
                   help="memory the model and its features may use (default: the "
                                                        "device's free memory)")
    p.add_argument("--composition", action="store_true",
                   help="add an ensemble and a composer of every subset (n >= 2) to the run, scored by lm-eval")
    p.add_argument("--join-leaderboard", action="store_true",
                   help="also write RUN/report/leaderboard_probe.csv: the suite's scores with N, FH and R per task")
    p.add_argument("--partitions", help="class partitions for the composer-minus-ensemble table (Tables 2 and 7, "
                                        "Fig. 2): ward and / or random:SEED, comma-separated (paper: "
                                        "ward,random:100,random:200)")
    p.add_argument("--partition-tasks", type=int_at_least(2), default=DEFAULT_TASKS,
                   help=f"class sets T per partition (default {DEFAULT_TASKS}, the paper's)")
    p.add_argument("--router", help="model whose features build the Ward partition and route the composer (default: "
                                    "the run's base; with --model, the first --model)")
    p.add_argument("--out", help="output folder (default: RUN/probe/<suite>/ or ./wildmerge-probe/<suite>/; with "
                                 "several runs, where the tables over model seeds go)")


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


def run(args) -> int:
    from wildmerge.threads import torch_threads

    with torch_threads(max(1, args.threads)):  # the caller's count back after
        return _run(args)


def _run(args) -> int:
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
        out = Path(args.out or Path("wildmerge-probe") / suite.name)
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

        out = Path(args.out or Path("wildmerge-probe") / suite.name)
        paths = write_seeds(aggregate_probe(per_run), out, args.run)
        if partitions:
            paths += write_geometry(aggregate_geometry(geometry), out, f"{len(args.run)} model seeds (runs)",
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
        write_outputs(rows, out, args.seeds)  # the probe's table first: the compositions' lm-eval jobs take longer
        rows += _composition_rows(args, run_dir, suite, models, tasks)
    for path in write_outputs(rows, out, args.seeds):
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
