"""``wildmerge eval RUN_DIR --suite NAME`` (every model of a run) or ``wildmerge eval --model PATH --suite NAME``.

Finished jobs are skipped, failed ones are rerun only with ``--retry-failed``; after a run the leaderboard is
written to ``RUN/report/`` (``--no-report`` to skip).
"""

from wildmerge.commands.options import add_eval_options, eval_options
from wildmerge.run import default_out


def configure(parser) -> None:
    parser.add_argument("run_dir", nargs="?", help="a run folder written by `wildmerge sample` (has plan.json)")
    parser.add_argument("--model", action="append", default=[], metavar="PATH",
                        help="ad hoc: a model folder, hub id in the local cache, or demo:<name> (repeatable)")
    parser.add_argument("--suite", required=True, help="a shipped suite (paper16, medical, math, demo) or a YAML file")
    parser.add_argument("--out", default=str(default_out("eval")), help="results folder for --model (default: %(default)s)")
    parser.add_argument("--allow-pickle", action="store_true", help="accept .bin/.pt checkpoints (untrusted code!)")
    parser.add_argument("--no-report", action="store_true", help="do not write RUN/report/ afterwards")
    add_eval_options(parser)


def run(args) -> int:
    from wildmerge.protocol import evaluate

    return evaluate(args.run_dir, args.model, args.suite, eval_options(args), out=args.out,
                    report=not args.no_report)
