"""``wildmerge report RUN_DIR``: leaderboard tables, plots and the index.html page of a run;
``wildmerge report --combine RUN RUN ... --out DIR``: Tables 1-3 across runs (one per base) with Average rows
and Figs. 3 / 4 / 6 with one column per base."""

from wildmerge.commands.options import folder_target
from wildmerge.errors import ConfigError


def configure(parser) -> None:
    parser.add_argument("run_dir", nargs="?", help="a run folder evaluated with `wildmerge eval`")
    parser.add_argument("--suite", help="which evaluated suite (default: every one)")
    parser.add_argument("--out", help="output folder (default: RUN_DIR/report; with --combine: combined-report)")
    parser.add_argument("--combine", nargs="+", metavar="RUN",
                        help="several evaluated runs (one per base model): write their Tables 1-3 side by side with "
                             "the paper's Average rows, and Figs. 3 / 4 / 6 with one column per base")
    parser.add_argument("--hf-dataset", metavar="OUT", type=folder_target,
                        help="also write the leaderboard as a Hugging Face dataset folder (the CSVs and a dataset "
                             "card) ready for `huggingface-cli upload USER/NAME OUT --repo-type dataset`")


def run(args) -> int:
    if args.combine:
        from wildmerge.analysis.report.combine import write_combined

        runs = ([args.run_dir] if args.run_dir else []) + list(args.combine)
        written = write_combined(runs, args.out or "combined-report", suite=args.suite)
        print(f"combined tables and figures: {written['combined_md']}")
        return 0
    if not args.run_dir:
        raise ConfigError("give a run folder (`wildmerge report RUN_DIR`) or several with `--combine RUN RUN ...`")
    from wildmerge.analysis.report.write import write_report

    if args.hf_dataset:  # a target that would mix files, refused before the report is written
        from wildmerge.analysis.report.hf_dataset import check_hf_dataset_target
        from wildmerge.run import RunFolder

        check_hf_dataset_target(args.hf_dataset, RunFolder(args.run_dir).name)
    written = write_report(args.run_dir, out_dir=args.out, suite=args.suite)
    for name, path in written.items():
        if name.endswith(("leaderboard_md", "scores_csv", "index_html")):
            print(f"{name}: {path}")
    print(f"{len(written)} file(s) written")
    if args.hf_dataset:
        from wildmerge.analysis.report.hf_dataset import write_hf_dataset
        from wildmerge.run import RunFolder

        out = write_hf_dataset(written, RunFolder(args.run_dir).name, args.hf_dataset)
        print(f"Hugging Face dataset folder: {out} (upload: huggingface-cli upload USER/NAME {out} --repo-type dataset)")
    return 0
