"""``wildmerge sample`` (and ``python sample_and_merge.py``): the in-the-wild protocol on one pool.

Draw the subsets once, merge each with every method (resumably), then evaluate and write the leaderboard.
With no arguments it runs on the embedded demo family with fewer subsets, so it finishes in minutes on a CPU.
"""

import argparse
import time
from collections import Counter
from pathlib import Path

from wildmerge.atomic import write_json
from wildmerge.commands.eval import add_eval_options, check_eval_options, eval_options
from wildmerge.errors import ConfigError

DEMO_SIZES, DEMO_K = (1, 2, 4), 2
PAPER_SIZES, PAPER_K = (1, 2, 4, 6, 8, 10), 15


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", "--pool", dest="pool", default="demo",
                   help="pool name (llama-3.2-3b, llama-3.1-8b, qwen3-4b, qwen3-8b, qwen3-4b-homogeneous, ..., demo) "
                        "or the path of a pool YAML (default: demo)")
    p.add_argument("--out", help="run directory (default: runs/<pool>-seed<seed>)")
    p.add_argument("--methods", type=_csv, default=None,
                   help="comma-separated method recipes (default: the paper's seven: ta,ties,model_stock,tsv_m,"
                        "iso_c,ta_sb,ties_sb; 'all' = every recipe in merge_recipes/methods)")
    p.add_argument("--sizes", type=_ints, default=None,
                   help=f"subset sizes n (default {','.join(map(str, PAPER_SIZES))}; demo "
                        f"{','.join(map(str, DEMO_SIZES))}); n = 1 means every expert alone, n = N is added")
    p.add_argument("--k", type=int, default=None, help=f"random subsets per size (default {PAPER_K}; demo {DEMO_K})")
    p.add_argument("--seed", type=int, default=0, help="seed of the subset draw (default 0)")
    p.add_argument("--no-full", dest="full", action="store_false", help="do not add the full pool (n = N)")
    p.add_argument("--homogeneous", action="store_true",
                   help="Appendix E: one merge per expert domain plus one of all experts, instead of random subsets")
    p.add_argument("--ablation", action="append", default=[], type=_csv,
                   help="Appendix C sweeps on the full pool: ta_lambda, ta_lambda_nonorm, ties_grid, ties_density, "
                        "sb_beta, or all (repeatable or comma-separated)")
    p.add_argument("--grid", help="YAML of extra sweeps: {name: {method: ta, grid: {lambda: [0.5, 1.0]}}}")
    p.add_argument("--tune", action="store_true",
                   help="choose each method's hyperparameters by the task alignment score on the pool before merging "
                        "(every expert needs calibration data; see `wildmerge tune`)")
    p.add_argument("--tune-grid", help="YAML of tuning grids {name: {method, grid}} (default: built-in per method)")
    p.add_argument("--tune-samples", type=int, default=128, help="unlabelled samples per expert for --tune")
    p.add_argument("--select", choices=("random", "predicted"), default="random",
                   help="predicted: take the k best-scored subsets of each size from a fitted mergeability predictor "
                        "(--predictor) instead of random ones; recorded in the manifest")
    p.add_argument("--predictor", help="predictor.json (or its folder) written by `wildmerge analyze predictor`")
    p.add_argument("--predictor-method", help="score subsets with this method's fit (default: all methods, z-scored)")
    p.add_argument("--exclude", action="append", default=[], type=_csv, help="leave these experts (names) out")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its cost; merge nothing")
    p.add_argument("--keep-models", choices=("all", "none"), default="all",
                   help="'none' deletes each merged model's weights once it is evaluated (keeps recipe and info)")
    ev = p.add_mutually_exclusive_group()
    ev.add_argument("--evaluate", dest="evaluate", action="store_true", default=None,
                    help="evaluate every model and write the report (default for the demo pool)")
    ev.add_argument("--no-evaluate", dest="evaluate", action="store_false", help="merge only")
    p.add_argument("--suite", help="evaluation suite (default: demo for the demo pool)")
    p.add_argument("--device", default="cpu", help="mergekit math device for merging: cpu, cuda, auto")
    p.add_argument("--allow-pickle", action="store_true", help="accept checkpoints that ship only pickle weights")
    p.add_argument("--no-download", action="store_true", help="use only the local hub cache, even when online")
    add_eval_options(p, device_flag="--eval-device")


def _settings(args, pool) -> dict:
    demo = pool.name == "demo"
    default = [n for n in (DEMO_SIZES if demo else PAPER_SIZES) if n < len(pool.experts)]  # n = N is added anyway
    out = dict(seed=args.seed, sizes=args.sizes or default,
               k=args.k if args.k is not None else (DEMO_K if demo else PAPER_K), full=args.full,
               homogeneous=args.homogeneous)
    if getattr(args, "select", "random") == "predicted":
        out.update(_predicted(args))
    return out


def _predicted(args) -> dict:
    """The scorer of ``--select predicted`` and its record for the manifest."""
    import hashlib

    from wildmerge.analysis.mergeability.selection import load_scorer

    if not args.predictor:
        raise ConfigError("--select predicted needs --predictor PATH (predictor.json from `wildmerge analyze predictor`)")
    if args.homogeneous:
        raise ConfigError("--select predicted and --homogeneous both choose the subsets: pick one")
    scorer = load_scorer(args.predictor, args.predictor_method)
    path = Path(args.predictor).resolve()
    path = path / "predictor.json" if path.is_dir() else path
    record = {"predictor": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
              "method": args.predictor_method or "all (z-scored mean over methods)",
              "aggregation": "mean predicted pairwise score over the subset's pairs"}
    return {"select": record, "scorer": scorer}


def _method_names(args) -> list[str]:
    from wildmerge.plugins.recipes import PAPER_METHODS

    if args.methods == []:  # `--methods ''` or `--methods ,`: an empty list is a mistake, not "all"
        raise ConfigError("--methods is empty; give comma-separated method recipes (e.g. ta,ties), or leave the "
                          "option out for the paper's seven")
    names = args.methods or list(PAPER_METHODS)
    if names == ["all"]:
        from wildmerge.plugins.recipes import list_method_recipes

        names = list_method_recipes()
    return list(dict.fromkeys(names))


def _evaluate(run_dir: Path, args, suite: str, model_ids=None):
    from wildmerge.eval.evaluate import evaluate_run

    return evaluate_run(str(run_dir), suite, model_ids=model_ids, **eval_options(args))


def run(args) -> int:
    from wildmerge.run import RunFolder
    from wildmerge.sampling.ablations import load_grids
    from wildmerge.plugins.recipes import load_methods
    from wildmerge.sampling.pools import load_pool

    pool = load_pool(args.pool)
    excluded = [n for group in args.exclude for n in group]
    if excluded:
        pool = pool.without(excluded)
    settings = _settings(args, pool)
    if settings["k"] < 1:
        raise ConfigError(f"--k must be at least 1 (got {settings['k']})")
    too_big = [n for n in settings["sizes"] if n > len(pool.experts) or n < 1]
    if too_big:
        raise ConfigError(f"--sizes {too_big}: pool {pool.name!r} has {len(pool.experts)} experts; "
                          f"use sizes between 1 and {len(pool.experts)}")
    methods = load_methods(_method_names(args))
    grids = load_grids([n for group in args.ablation for n in group], args.grid)
    load_methods({g.method for g in grids.values()})
    evaluate = pool.name == "demo" if args.evaluate is None else args.evaluate
    suite = args.suite or ("demo" if pool.name == "demo" else None)
    if evaluate and not suite:
        raise ConfigError("--evaluate needs --suite NAME (a file in merge_recipes/suites/ or a suite YAML path)")
    if evaluate:
        check_eval_options(args)  # a misplaced option fails before any merge
    run_dir = Path(args.out or Path("runs") / f"{pool.name}-seed{args.seed}").resolve()

    if args.dry_run:
        from wildmerge.sampling.dryrun import print_dry_run

        return print_dry_run(run_dir, pool, settings, methods, grids, args)
    if args.keep_models == "none" and not evaluate:
        raise ConfigError("--keep-models none deletes each merged model's weights once it is evaluated: add "
                          "--evaluate --suite NAME, or use --keep-models all")
    evaluate_one = (lambda e: _evaluate(run_dir, args, suite, [e.model_id])) if args.keep_models == "none" else None
    tuned = {}
    if args.tune:
        from wildmerge.commands.tune import tune_methods

        methods, tuned = tune_methods(pool, methods, run_dir / "tune", args.tune_grid, samples=args.tune_samples,
                                      device=args.device, allow_pickle=args.allow_pickle)
    log = run_protocol(run_dir, pool, settings, methods, grids, merge_device=args.device,
                       allow_pickle=args.allow_pickle, download=False if args.no_download else None,
                       keep_models=args.keep_models, after_each=evaluate_one)
    if tuned:
        from wildmerge.run import RunFolder

        folder = RunFolder(run_dir)
        folder.write_manifest(folder.read_manifest().model_copy(update={"tuned": tuned}))
    if evaluate:
        from wildmerge.analysis.report.write import write_report

        summary = _evaluate(run_dir, args, suite)
        outputs = write_report(run_dir)
        log["report"] = {k: str(v) for k, v in outputs.items()}
        print(f"report: {run_dir / 'report'}")
    log["args"] = {k: v for k, v in vars(args).items() if k != "func"}
    write_json(RunFolder(run_dir).sample_log, log)
    return 1 if evaluate and summary["failed"] else 0


def run_protocol(run_dir: Path, pool, settings: dict, methods: dict, grids: dict, *, merge_device="cpu",
                 allow_pickle=False, download=None, keep_models="all", after_each=None) -> dict:
    """Draw (or reuse) the subsets, write the plan, merge what is not done yet; returns the run log."""
    from wildmerge.run import Plan, RunFolder, merged_with_previous
    from wildmerge.sampling.manifest import prepare
    from wildmerge.sampling.plan import build_entries
    from wildmerge.merging.runner import merge_options, run_plan

    started = time.time()
    run = RunFolder(run_dir)
    manifest, models = prepare(run_dir, pool, allow_pickle=allow_pickle, download=download, **settings)
    entries = build_entries(run_dir, manifest.subsets, models, methods, grids)
    if run.has_plan():
        kept = [e for e in run.read_plan().entries if e.kind in ("merge", "composition")]  # and added baselines
        entries = merged_with_previous(kept, entries)
    run.write_plan(Plan(run=run.name, run_dir=str(run.root), pool=pool.name, methods=list(methods),
                        ablations=list(grids), entries=entries))
    merges = [e for e in entries if e.kind == "merge"]
    print(f"run {run_dir}: pool {pool.name!r}, {len(pool.experts)} experts, {len(manifest.subsets)} subsets, "
          f"{len(merges)} merges ({', '.join(f'{m} {c}' for m, c in Counter(e.method for e in merges).items())})")
    for note in manifest.notes:
        print(f"  note: {note}")
    options = merge_options(models, device=merge_device, allow_pickle=allow_pickle, seed=settings["seed"])
    stats = run_plan(entries, models, methods, options, keep_models=keep_models, after_each=after_each)
    print(f"merges: {stats['merged']} new, {stats['redone']} redone, {stats['skipped']} already done "
          f"({stats['seconds']:.1f} s merging)")
    return {"command": "wildmerge sample", "settings": {k: v for k, v in settings.items() if k != "scorer"},
            "stats": stats,
            "seconds": round(time.time() - started, 1)}
