"""Argument types and option groups shared by several commands (a helper module, not a subcommand)."""

import argparse

from wildmerge.eval.options import EvalOptions


def comma_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def comma_ints(text: str) -> list[int]:
    try:
        return [int(t) for t in comma_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_eval_options(parser, device_flag: str = "--device") -> None:
    """The evaluation options, shared by ``wildmerge eval`` and the protocol driver ``wildmerge sample`` (where the
    evaluation device is ``--eval-device``: its ``--device`` is an old name of ``--merge-device``). Values are
    parsed as text and checked once, by ``EvalOptions``."""
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
    parser.add_argument("--wandb-args", metavar="KEY=VALUE,...",
                        help="log every scored model to Weights & Biases through lm-eval's own logger, with the run's "
                             "manifest as its config: wandb.init's arguments, e.g. project=merging,entity=team "
                             "(needs `pip install wandb`; WANDB_MODE=offline writes the runs locally)")
    w = parser.add_argument_group("local executor (long-lived workers)")
    w.add_argument("--workers", type=int, help="worker processes (default: one per visible GPU, else one per two "
                                               "CPU cores, at most four)")
    w.add_argument("--job-timeout", type=float, help="seconds one model may take before its worker is replaced "
                                                     "(default 3600)")
    g = parser.add_argument_group("evaluation settings overrides (change the job ids)")
    g.add_argument("--limit", help="documents per task (a whole number: 2, 100) or a fraction of each task "
                                   "strictly between 0 and 1 (0.1)")
    g.add_argument("--dtype", choices=["auto", "float16", "bfloat16", "float32"])
    g.add_argument("--batch-size", help="int or auto")
    g.add_argument(device_flag, dest="device", help="evaluation device: cpu, cuda, cuda:1 ... (default: the suite's; a suite's auto is the "
                             "GPU when this machine has one, else the CPU)")
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


def eval_options(args) -> EvalOptions:
    """The options of ``add_eval_options`` (and ``--allow-pickle``) that were given, as one checked ``EvalOptions``:
    a bad value is a ``ConfigError`` naming its flag."""
    given = {name: getattr(args, name) for name in EvalOptions.model_fields}
    return EvalOptions(**{name: value for name, value in given.items() if value is not None})
