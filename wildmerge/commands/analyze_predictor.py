"""``wildmerge analyze predictor --run RUN --metrics DIR``: fit Zhou et al. 2026's mergeability predictor per merge method."""

import argparse
from pathlib import Path

from wildmerge.commands.options import nonnegative_float, nonnegative_int, positive_int

HELP = "fit the sparse Pearson predictor of merge success from the pairwise metrics (Zhou et al. 2026)"
DESCRIPTION = ("Joins the pairwise metrics (`wildmerge analyze mergeability`) with the targets of a run's evaluated "
               "2-expert merges, fits the L1-regularised Pearson predictor per method with leave-one-expert-out "
               "folds, and writes validation r (Table 2), coefficients (Table 8), top-k overlap and sign agreement "
               "(Tables 6-7), a coefficient heatmap, and predictor.json for `wildmerge sample --select predicted`. "
               "With --study: the paper's robustness studies instead (category ablation, MSE, MLP, seeds, lambda "
               "= 0, non-zero frequency, stable metrics) in one study folder.")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="a run folder with evaluated 2-expert merges (wildmerge sample --sizes 2)")
    p.add_argument("--metrics", required=True, help="folder (or metrics.csv) written by `analyze mergeability`")
    p.add_argument("--suite", help="evaluated suite of the run (default: the only one)")
    p.add_argument("--target", choices=["auto", "normalized", "relative"], default="auto",
                   help="normalized: the paper's, on each expert's own tasks; relative: merge mean / experts' mean")
    p.add_argument("--profile", choices=["ref", "paper"], default="ref", help="optimiser profile (default ref)")
    p.add_argument("--lam", type=nonnegative_float, default=1.0, help="L1 weight lambda (paper: 1.0)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the coefficient initialisation")
    p.add_argument("--metric-set", choices=["auto", "all", "reduced"], default="auto",
                   help="all 28, the reduced gradient + subspace 12, or auto (reduced when pairs are too few)")
    p.add_argument("--rank-subsets", type=nonnegative_int,
                   default=0, metavar="N", help="also rank every subset of size N")
    p.add_argument("--study", action="store_true",
                   help="run the robustness studies (Zhou et al. 2026, Tables 3, 4, 11-15, 19, Figs. 3 / 6)")
    p.add_argument("--seeds", type=positive_int, default=3, metavar="N",
                   help="with --study: seeds --seed .. --seed + N - 1 (paper: 10; default 3)")
    p.add_argument("--out", help="output folder (default: RUN/mergeability, with --study RUN/mergeability/study)")


def run(args) -> int:
    from wildmerge.analysis.mergeability.fitting import fit_methods, plot_coefficients, tables
    from wildmerge.analysis.mergeability.io import read_metrics
    from wildmerge.analysis.mergeability.selection import pair_scores
    from wildmerge.analysis.mergeability.targets import pair_targets
    from wildmerge.atomic import write_json, write_text
    from wildmerge.run import RunFolder

    metrics, side = read_metrics(args.metrics)
    targets = pair_targets(args.run, args.suite, args.target)
    if args.study:
        return _study(args, metrics, targets)
    fits = fit_methods(metrics, targets, profile=args.profile, lam=args.lam, seed=args.seed,
                       metric_set=args.metric_set)
    fits["pair_scores"] = pair_scores(fits, metrics)
    fits["target"] = str(targets["target_kind"].iloc[0])
    fits["inputs"] = {"run": str(Path(args.run).resolve()), "metrics": str(Path(args.metrics).resolve()),
                      "metric_settings": side.get("settings")}
    out = Path(args.out or RunFolder(args.run).mergeability_dir)
    written = [write_text(out / "targets.csv", targets.to_csv(index=False, float_format="%.6g")),
               write_json(out / "predictor.json", fits)]
    for name, df in tables(fits).items():
        written.append(write_text(out / f"{name}.csv", df.to_csv(index=False, float_format="%.6g")))
    written += plot_coefficients(fits, out)
    if args.rank_subsets:
        written.append(_rank(fits, args.rank_subsets, out))
    for path in written:
        print(f"wrote {path}")
    for note in fits["notes"]:
        print(f"note: {note}")
    print(tables(fits)["validation"].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0


def _rank(fits: dict, n: int, out: Path) -> Path:
    import itertools

    import pandas as pd

    from wildmerge.analysis.mergeability.selection import load_scorer
    from wildmerge.atomic import write_text

    experts = list(dict.fromkeys(e for k in fits["pair_scores"]["all"] for e in k.split("__")))
    rows = []
    for method in fits["pair_scores"]:
        score = load_scorer(out / "predictor.json", method)
        rows += [{"method": method, "n": n, "experts": ";".join(c), "score": score(c)}
                 for c in itertools.combinations(experts, n)]
    df = pd.DataFrame(rows).sort_values(["method", "score"], ascending=[True, False])
    return write_text(out / f"subset_scores_n{n}.csv", df.to_csv(index=False, float_format="%.6g"))


def _study(args, metrics, targets) -> int:
    from wildmerge.analysis.mergeability.study import plot_nonzero_frequency, readme, run_study, tables
    from wildmerge.atomic import write_json, write_text
    from wildmerge.run import RunFolder

    study = run_study(metrics, targets, profile=args.profile, lam=args.lam,
                      seeds=range(args.seed, args.seed + args.seeds), metric_set=args.metric_set)
    study["target"] = str(targets["target_kind"].iloc[0])
    out = Path(args.out or RunFolder(args.run).predictor_study_dir)
    frames = tables(study)
    written = [write_json(out / "study.json", study)]
    for name, df in frames.items():
        written.append(write_text(out / f"{name}.csv", df.to_csv(index=False, float_format="%.6g")))
    written += plot_nonzero_frequency(study, out)
    written.append(write_text(out / "README.md", readme(study, frames)))
    for path in written:
        print(f"wrote {path}")
    for note in study["notes"]:
        print(f"note: {note}")
    print(frames["ablation"].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0
