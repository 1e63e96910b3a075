"""``wildmerge analyze mergeability --pool NAME`` (or ``--run RUN``): the 28 pairwise metrics of Zhou et al. 2026."""

import argparse
import dataclasses

from wildmerge.commands.options import comma_list, device, nonnegative_int, positive_int

HELP = "the 28 pairwise mergeability metrics of every pair of experts (Zhou et al. 2026)"
DESCRIPTION = ("Weight-space (task vector, effective rank, subspace), activation and gradient metrics for every pair "
               "of experts, computed without merging (Zhou et al., 'Demystifying Mergeability', arXiv 2601.22285). "
               "Per-model statistics are cached: adding an expert costs that expert's work only. Writes metrics.csv "
               "(pair x metric) and metrics.json (settings, scope, diagnostics).")


def configure(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--pool", help="pool name or YAML path (default: demo)")
    src.add_argument("--run", help="a run folder: use its manifest's resolved pool")
    p.add_argument("--exclude", action="append", default=[], type=comma_list, help="leave these experts out")
    p.add_argument("--groups", type=comma_list, default=["weights", "activations", "gradients"],
                   help="comma-separated: weights, activations, gradients (default: all three)")
    p.add_argument("--out", help="output folder (default: runs/analysis-<pool>/mergeability)")
    p.add_argument("--cache", help="per-model statistics cache (default: <out>/cache)")
    p.add_argument("--device", default="cpu", type=device, help="device for SVDs and model passes: cpu, cuda (default cpu)")
    p.add_argument("--k", type=positive_int, default=10, help="top/bottom-k singular directions (paper: 10)")
    p.add_argument("--subspace-scope", choices=["blocks", "all_2d"], default="blocks",
                   help="2-D tensors of the subspace metrics: inside transformer blocks (paper) or all in scope")
    p.add_argument("--n-own", type=positive_int,
                   default=10, help="labelled items per expert for its gradient (paper: 10)")
    p.add_argument("--n-pooled", type=positive_int,
                   default=10, help="items per expert in the shared pooled set (paper: 10)")
    p.add_argument("--max-len", type=positive_int, default=64, help="tokens per calibration item")
    p.add_argument("--seed", type=nonnegative_int, default=42, help="calibration sampling seed (paper: 42)")
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle-only checkpoints")


def run(args) -> int:
    from wildmerge.analysis.mergeability.pool_metrics import MetricsJob, pool_metrics

    return pool_metrics(MetricsJob(**{f.name: getattr(args, f.name) for f in dataclasses.fields(MetricsJob)}))
