"""``wildmerge eval RUN_DIR --suite NAME`` (every model of a run) or ``wildmerge eval --model PATH --suite NAME``.

Finished jobs are skipped, failed ones are rerun only with ``--retry-failed``; after a run the leaderboard is
written to ``RUN/report/`` (``--no-report`` to skip).
"""

import argparse

from wildmerge.errors import ConfigError

OVERRIDES = ("limit", "dtype", "batch_size", "device")
EXECUTOR_OPTIONS = ("workers", "job_timeout", "ray_address", "gpus_per_job", "cpus_per_job", "slurm_partition", "slurm_time", "slurm_mem_gb",
                    "slurm_array_parallelism", "slurm_cluster")


def add_eval_options(parser, device_flag: str = "--device") -> None:
    """The evaluation options, shared by ``wildmerge eval`` and the protocol driver ``wildmerge sample``."""
    parser.add_argument("--executor", default="local", choices=["local", "serial", "ray", "slurm"],
                        help="where evaluation jobs run: local = long-lived workers on this machine, one per GPU; "
                             "serial = a fresh process per job (default: %(default)s)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="rerun the jobs that failed before (a job whose worker was killed is redone once anyway)")
    parser.add_argument("--record-items", action="store_true",
                        help="keep every document's score in the results (for `wildmerge.eval.screening.stats`)")
    parser.add_argument("--screen", type=float, metavar="FRACTION",
                        help="score every model on this fraction of each task's items first (the same items for "
                             "all); finish only models whose result vs the base / best expert is still open "
                             "(paired bootstrap intervals); base and experts are always scored in full")
    w = parser.add_argument_group("local executor (long-lived workers)")
    w.add_argument("--workers", type=int, help="worker processes (default: one per visible GPU, else one per two "
                                               "CPU cores, at most four)")
    w.add_argument("--job-timeout", type=float, help="seconds one model may take before its worker is replaced "
                                                     "(default 3600)")
    g = parser.add_argument_group("evaluation settings overrides (change the job ids)")
    g.add_argument("--limit", type=float, help="documents per task (int) or fraction (<1)")
    g.add_argument("--dtype", choices=["auto", "float16", "bfloat16", "float32"])
    g.add_argument("--batch-size", help="int or auto")
    g.add_argument(device_flag, dest="device", help="evaluation device: cpu, cuda, cuda:1 ... (default: the suite's)")
    r = parser.add_argument_group("Ray executor")
    r.add_argument("--ray-address", help="join a cluster (auto, ray://host:10001); default: a local one")
    r.add_argument("--gpus-per-job", type=float, help="GPUs per job (default 1 where GPUs exist, else 0)")
    r.add_argument("--cpus-per-job", type=float, default=None, help="CPUs per job (Ray 1, Slurm 4)")
    s = parser.add_argument_group("Slurm executor (submitit job array)")
    s.add_argument("--slurm-partition")
    s.add_argument("--slurm-time", type=int, help="minutes per job (default 240)")
    s.add_argument("--slurm-mem-gb", type=int)
    s.add_argument("--slurm-array-parallelism", type=int, help="array tasks at once (default 64)")
    s.add_argument("--slurm-cluster", help=argparse.SUPPRESS)  # 'local' / 'debug': submitit's stand-ins, for tests


def executor_kwargs(args) -> dict:
    """The executor options the user set (an option for another executor is then an error, not ignored)."""
    return {k: getattr(args, k) for k in EXECUTOR_OPTIONS if getattr(args, k) is not None}


def check_eval_options(args) -> None:
    """Fail on a misplaced executor option or a bad override before any heavy work."""
    from wildmerge.eval.executors import executor_options

    executor_options(args.executor, executor_kwargs(args))
    _overrides(args)
    if args.screen is not None and not 0 < args.screen < 1:
        raise ConfigError(f"--screen {args.screen}: give a fraction between 0 and 1, e.g. --screen 0.2")


def eval_options(args) -> dict:
    """Keyword arguments of ``evaluate_run`` / ``evaluate_models`` from the parsed options."""
    return dict(executor=args.executor, retry_failed=args.retry_failed, overrides=_overrides(args),
                allow_pickle=args.allow_pickle, record_items=args.record_items, **executor_kwargs(args),
                **({"screen": args.screen} if args.screen is not None else {}))


def configure(parser) -> None:
    parser.add_argument("run_dir", nargs="?", help="a run folder written by `wildmerge sample` (has plan.json)")
    parser.add_argument("--model", action="append", default=[], metavar="PATH",
                        help="ad hoc: a model folder, hub id in the local cache, or demo:<name> (repeatable)")
    parser.add_argument("--suite", required=True, help="a shipped suite (paper16, medical, math, demo) or a YAML file")
    parser.add_argument("--out", default="wildmerge-eval", help="results folder for --model (default: %(default)s)")
    parser.add_argument("--allow-pickle", action="store_true", help="accept .bin/.pt checkpoints (untrusted code!)")
    parser.add_argument("--no-report", action="store_true", help="do not write RUN/report/ afterwards")
    add_eval_options(parser)


def _overrides(args):
    out = {k: getattr(args, k) for k in OVERRIDES if getattr(args, k) is not None}
    if "limit" in out and out["limit"] >= 1:
        out["limit"] = int(out["limit"])
    if "batch_size" in out and out["batch_size"] != "auto":
        try:
            out["batch_size"] = int(out["batch_size"])
        except ValueError:
            raise ConfigError(f"--batch-size must be an integer or auto, got {out['batch_size']!r}") from None
    return out


def run(args) -> int:
    from wildmerge.eval.evaluate import evaluate_models, evaluate_run

    if bool(args.run_dir) == bool(args.model):
        raise ConfigError("give either a RUN_DIR or one or more --model PATH, not both and not neither")
    common = eval_options(args)
    if args.model:
        summary = evaluate_models(args.model, args.suite, args.out, **common)
        _print_scores(summary)
    else:
        summary = evaluate_run(args.run_dir, args.suite, **common)
        if not args.no_report:
            from wildmerge.analysis.report.write import write_report

            written = write_report(args.run_dir, suite=summary["suite"])
            print("leaderboard: " + ", ".join(str(v) for k, v in written.items() if k.endswith("leaderboard_md")))
    return 1 if summary["failed"] else 0


def _print_scores(summary) -> None:
    from wildmerge.eval.store import ResultStore

    store = ResultStore(summary["store"])
    for model, job_id in summary["index"].items():
        record = store.load(job_id)
        if record["status"] == "ok":
            scores = record["scores"]
            mean = 100 * sum(scores.values()) / len(scores)
            cells = "  ".join(f"{k}={100 * v:.1f}" for k, v in scores.items())
            print(f"{model}: mean={mean:.2f}  {cells}")
        else:
            print(f"{model}: FAILED ({(record.get('error') or '').splitlines()[0]})")
