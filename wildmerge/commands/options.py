"""Argument types and option groups shared by several commands (a helper module, not a subcommand)."""

import argparse

from wildmerge import numbers
from wildmerge.eval.options import NUMBERS, EvalOptions


def number_type(rule: numbers.Range, name: str):
    """An argparse type for the numbers ``rule`` accepts: NaN, infinities and values out of range are refused at
    parse time, in argparse's own line (``argument --budget: expected a number >= 2, got 'nan'``). The rule is kept
    on the type (``.rule``), so tests can find every numeric option and try bad values on it."""

    def parse(text: str):
        try:
            return rule.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name
    parse.rule = rule
    return parse


# every numeric option of every command takes one of these (tests/commands/test_bad_inputs_table.py checks it)
positive_int = number_type(numbers.POSITIVE_INT, "positive_int")
nonnegative_int = number_type(numbers.NONNEGATIVE_INT, "nonnegative_int")
any_int = number_type(numbers.ANY_INT, "any_int")  # seeds
positive_float = number_type(numbers.POSITIVE_FLOAT, "positive_float")
nonnegative_float = number_type(numbers.NONNEGATIVE_FLOAT, "nonnegative_float")
finite_float = number_type(numbers.FINITE_FLOAT, "finite_float")
fraction = number_type(numbers.FRACTION, "fraction")  # 0..1
open_fraction = number_type(numbers.OPEN_FRACTION, "open_fraction")  # strictly between 0 and 1


def check_points(text: str) -> int:
    """``tune --check K`` / ``sample --tune-check K``: 0 (no check) or at least 3 points (a Spearman correlation
    of fewer points says nothing)."""
    from wildmerge.analysis.tas.check import points_problem

    k = nonnegative_int(text)
    if points_problem(k):
        raise argparse.ArgumentTypeError(points_problem(k))
    return k


check_points.rule = numbers.NONNEGATIVE_INT


def int_at_least(n: int):
    return number_type(numbers.int_at_least(n), f"int_at_least({n})")


def float_at_least(n: float):
    return number_type(numbers.float_at_least(n), f"float_at_least({n})")


def float_above(n: float):
    return number_type(numbers.float_above(n), f"float_above({n})")


def checked_text(check, name: str, bad_values: tuple):
    """An argparse type for a text option: ``check(text)`` says what is wrong with it (None: nothing), in argparse's
    own line. ``bad_values`` (kept on the type) are values it refuses: tests/commands/test_bad_inputs_table.py tries them on
    every option that takes the type, so a new option of the kind is tried as soon as it exists."""

    def parse(text: str) -> str:
        problem = check(text)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return text

    parse.__name__ = name
    parse.bad_values = bad_values
    return parse


def _device_problem(text: str):
    from wildmerge.resources import device_problem

    return device_problem(text)


# a device a command uses itself (merges, tune, analyses): its name checked at parse time by the one device rule
# (``resources.device_problem``); whether the GPU is there, before any model is read (``checked_device``)
device = checked_text(_device_problem, "device", ("gpu", "CPU", ""))


def _folder_target(text: str):
    from pathlib import Path

    if Path(text).exists() and not Path(text).is_dir():
        return f"{text} is a file, not a folder; give a new or empty folder"
    return None


folder_target = checked_text(_folder_target, "folder_target", ("/dev/null",))  # an output folder (not a file)


def _by_eval_options(name: str, bad_values: tuple):
    """The type of a text evaluation option: the text as given, checked once by ``EvalOptions`` (``eval_options``,
    before any other work); ``bad_values`` are for the table's rows."""
    return checked_text(lambda text: None, name, bad_values)


# sample --calibrate-from RUN: the folder checked by the protocol, whenever given, before any other work
calibration_run = checked_text(lambda text: None, "calibration_run", ("nosuchrun",))


def comma_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def comma_ints(text: str) -> list[int]:
    try:
        return [int(t) for t in comma_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def comma_positive_ints(text: str) -> list[int]:
    """Comma-separated whole numbers >= 1 (subset sizes)."""
    values = comma_ints(text)
    bad = [v for v in values if v < 1]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1, got {text!r}")
    return values


def _evaluation(name: str):
    """The type of a numeric evaluation option: ``EvalOptions``' own rule, so both say the same."""
    return number_type(NUMBERS[name], name)


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
    parser.add_argument("--screen", type=_evaluation("screen"), metavar="FRACTION",
                        help="score every model on this fraction of each task's items first (the same items for "
                             "all); finish only models whose result vs the base / best expert is still open "
                             "(paired bootstrap intervals); base and experts are always scored in full")
    parser.add_argument("--wandb-args", metavar="KEY=VALUE,...",
                        type=_by_eval_options("wandb_args", ("nosuchkey=1", "project=", "project=a,project=b")),
                        help="log every scored model to Weights & Biases through lm-eval's own logger, with the run's "
                             "manifest as its config: wandb.init's arguments, e.g. project=merging,entity=team "
                             "(needs `pip install wandb`; WANDB_MODE=offline writes the runs locally)")
    w = parser.add_argument_group("local executor (long-lived workers)")
    w.add_argument("--workers", type=_evaluation("workers"),
                   help="worker processes (default: one per visible GPU, else one per CPU core, at most four)")
    w.add_argument("--job-timeout", type=_evaluation("job_timeout"),
                   help="seconds one model may take before its worker is replaced "
                                                     "(default 3600)")
    g = parser.add_argument_group("evaluation settings overrides (change the job ids)")
    g.add_argument("--limit", help="documents per task (a whole number: 2, 100) or a fraction of each task "
                                   "strictly between 0 and 1 (0.1)")
    g.add_argument("--dtype", choices=["auto", "float16", "bfloat16", "float32"])
    g.add_argument("--batch-size", type=_by_eval_options("batch_size", ("0", "-4", "1.5", "nan")),
                   help="a whole number >= 1, or auto")
    g.add_argument(device_flag, dest="device", type=_by_eval_options("device", ("gpu", "CPU", "")), help="evaluation device: cpu, cuda, cuda:1 ... (default: the suite's; a suite's auto is the "
                             "GPU when this machine has one, else the CPU)")
    r = parser.add_argument_group("Ray executor")
    r.add_argument("--ray-address", help="join a cluster (auto, ray://host:10001); default: a local one")
    r.add_argument("--gpus-per-job", type=_evaluation("gpus_per_job"),
                   help="GPUs per job (default 1 where GPUs exist, else 0)")
    r.add_argument("--cpus-per-job", type=_evaluation("cpus_per_job"),
                   default=None, help="CPUs per job (Ray 1, Slurm 4)")
    s = parser.add_argument_group("Slurm executor (submitit job array)")
    s.add_argument("--slurm-partition")
    s.add_argument("--slurm-time", type=_evaluation("slurm_time"), help="minutes per job (default 240)")
    s.add_argument("--slurm-mem-gb", type=_evaluation("slurm_mem_gb"))
    s.add_argument("--slurm-array-parallelism", type=_evaluation("slurm_array_parallelism"),
                   help="array tasks at once (default 64)")
    s.add_argument("--slurm-cluster", help=argparse.SUPPRESS)  # 'local' / 'debug': submitit's stand-ins, for tests


def eval_options(args) -> EvalOptions:
    """The options of ``add_eval_options`` (and ``--allow-pickle``) that were given, as one checked ``EvalOptions``:
    a bad value is a ``ConfigError`` naming its flag."""
    given = {name: getattr(args, name) for name in EvalOptions.model_fields}
    return EvalOptions(**{name: value for name, value in given.items() if value is not None})
