"""``wildmerge report RUN_DIR``: leaderboard tables (CSV + Markdown), task-vector norms and plots of a run."""


def configure(parser) -> None:
    parser.add_argument("run_dir", help="a run folder evaluated with `wildmerge eval`")
    parser.add_argument("--suite", help="which evaluated suite (default: every one)")
    parser.add_argument("--out", help="output folder (default: RUN_DIR/report)")


def run(args) -> int:
    from wildmerge.analysis.report import write_report

    written = write_report(args.run_dir, out_dir=args.out, suite=args.suite)
    for name, path in written.items():
        if name.endswith(("leaderboard_md", "scores_csv")):
            print(f"{name}: {path}")
    print(f"{len(written)} file(s) written")
    return 0
