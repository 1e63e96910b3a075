"""``wildmerge sample`` (and ``python sample_and_merge.py``): the in-the-wild protocol on one pool.

Draw the subsets once, merge each with every method (resumably), then evaluate and write the leaderboard.
With no arguments it runs on the embedded demo family with fewer subsets, so it finishes in minutes on a CPU.
The work is ``wildmerge.protocol.run_sample``; this module only turns the arguments into its settings.
"""

import argparse
import sys

from wildmerge.commands.options import (add_eval_options, calibration_run, check_points, comma_list,
                                        comma_positive_ints, device, eval_options, nonnegative_int,
                                        positive_int)
from wildmerge.protocol import PAPER_K, PAPER_SIZES, SampleSettings, run_sample


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", "--pool", dest="pool", default="demo",
                   help="pool name (llama-3.2-3b, llama-3.1-8b, qwen3-4b, qwen3-8b, qwen3-4b-homogeneous, ..., demo) "
                        "or the path of a pool YAML (default: demo)")
    p.add_argument("--out", help="run directory (default: runs/<pool>-seed<seed>)")
    p.add_argument("--methods", type=comma_list, default=None,
                   help="comma-separated method recipes (default: the pool's protocol.methods, else the paper's seven: "
                        "ta,ties,model_stock,tsv_m,iso_c,ta_sb,ties_sb; 'all' = every recipe in merge_recipes/methods)")
    p.add_argument("--sizes", type=comma_positive_ints, default=None,
                   help=f"subset sizes n (default: the pool's protocol.sizes, else {','.join(map(str, PAPER_SIZES))}; "
                        f"demo 1,2,4); n = 1 means every expert alone, n = N is added")
    p.add_argument("--k", type=positive_int,
                   default=None,
                   help=f"random subsets per size (default: the pool's protocol.k, else {PAPER_K}; demo 2)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the subset draw (default 0)")
    p.add_argument("--no-full", dest="full", action="store_false", help="do not add the full pool (n = N)")
    p.add_argument("--homogeneous", action="store_true",
                   help="Appendix E: one merge per expert domain plus one of all experts, instead of random subsets")
    p.add_argument("--sweep", "--ablation", dest="sweep", action="append", default=[], type=comma_list,
                   help="sweeps on the full pool: ta_lambda, ta_lambda_nonorm, ties_grid, ties_density, sb_beta, "
                        "or all (Appendix C); com_components, com_samples (Chain of Merges' Tables 3 and 4) "
                        "(repeatable or comma-separated)")
    p.add_argument("--grid", help="YAML of extra sweeps: {name: {method: ta, grid: {lambda: [0.5, 1.0]}}}")
    p.add_argument("--tune", action="store_true",
                   help="choose each method's hyperparameters by the task alignment score on the pool before merging "
                        "(every expert needs calibration data; see `wildmerge tune`)")
    p.add_argument("--tune-grid", help="YAML of tuning grids {name: {method, grid}} (default: built-in per method)")
    p.add_argument("--tune-samples", type=positive_int, default=128, help="unlabelled samples per expert for --tune")
    p.add_argument("--tune-check", type=check_points, default=0, metavar="K",
                   help="with --tune: evaluate K grid points per method and record whether TAS tracks accuracy")
    p.add_argument("--select", choices=("random", "predicted", "balanced", "unbalanced"), default="random",
                   help="predicted: take the k best-scored subsets of each size from a fitted mergeability predictor "
                        "(--predictor) instead of random ones; balanced / unbalanced: the k subsets whose experts' "
                        "task-vector norms are the most / least equal (max/min ratio); recorded in the manifest")
    p.add_argument("--predictor", help="predictor.json (or its folder) written by `wildmerge analyze predictor`")
    p.add_argument("--predictor-method", help="score subsets with this method's fit (default: all methods, z-scored)")
    p.add_argument("--exclude", action="append", default=[], type=comma_list, help="leave these experts (names) out")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its cost; merge nothing")
    p.add_argument("--calibrate-from", metavar="RUN", type=calibration_run,
                   help="with --dry-run: cost the plan at the per-unit costs of this earlier run folder (its merge and "
                        "result records) instead of the built-in calibration")
    p.add_argument("--keep-models", choices=("all", "none"), default="all",
                   help="'none' deletes each merged model's weights once it is evaluated (keeps recipe and info)")
    ev = p.add_mutually_exclusive_group()
    ev.add_argument("--evaluate", dest="evaluate", action="store_true", default=None,
                    help="evaluate every model and write the report (default: the pool's protocol.evaluate: the embedded "
                         "demo and smollm2 families)")
    ev.add_argument("--no-evaluate", dest="evaluate", action="store_false", help="merge only")
    p.add_argument("--suite", help="evaluation suite (default: the pool's protocol.suite: demo, smollm2)")
    p.add_argument("--merge-device", "--device", dest="merge_device", default="cpu", action=_MergeDevice,
                   type=device,
                   help="mergekit math device for merging: cpu, cuda, auto (default: %(default)s); --device is its "
                        "old name (deprecated); the evaluation device is --eval-device")
    p.add_argument("--merge-workers", type=_workers, default=None,
                   help="merges run at once: N or 'auto' (default: one per visible GPU with --merge-device cuda, "
                        "else 1; auto on the CPU: as many as cores and free memory allow)")
    p.add_argument("--allow-pickle", action="store_true", help="accept checkpoints that ship only pickle weights")
    p.add_argument("--no-download", action="store_true", help="use only the local hub cache, even when online")
    add_eval_options(p, device_flag="--eval-device")


class _MergeDevice(argparse.Action):
    """``sample --device`` is the old name of ``--merge-device`` (everywhere else ``--device`` is the evaluation
    device): it still works, with a warning."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string == "--device":
            print(f"warning: `wildmerge sample --device` is deprecated: it sets the merge device, now --merge-device "
                  f"{values} (the evaluation device is --eval-device)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _workers(text: str):
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'auto', got {text!r}")
    return int(text)


def settings(args) -> SampleSettings:
    return SampleSettings(
        pool=args.pool, out=args.out, methods=args.methods, sizes=args.sizes, k=args.k, seed=args.seed,
        full=args.full, homogeneous=args.homogeneous, exclude=[n for group in args.exclude for n in group],
        select=args.select, predictor=args.predictor, predictor_method=args.predictor_method,
        ablations=[n for group in args.sweep for n in group], grid=args.grid, tune=args.tune,
        tune_grid=args.tune_grid, tune_samples=args.tune_samples, tune_check=args.tune_check, dry_run=args.dry_run,
        calibrate_from=args.calibrate_from,
        keep_models=args.keep_models, evaluate=args.evaluate, suite=args.suite, merge_device=args.merge_device,
        merge_workers=args.merge_workers, allow_pickle=args.allow_pickle,
        download=False if args.no_download else None, evaluation=eval_options(args))


def run(args) -> int:
    return run_sample(settings(args)).code
