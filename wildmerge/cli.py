"""The ``wildmerge`` command: one entry point, one subcommand per job.

Each subcommand lives in its own module of ``wildmerge.commands`` that exposes ``configure(parser)`` and ``run(args) -> int``; modules are
imported only when their subcommand runs, so ``wildmerge --help`` stays fast. A ``WildmergeError`` is printed
as a one-line message (exit 2), never as a traceback.
"""

import argparse
import importlib
import sys

from wildmerge import __version__
from wildmerge.errors import WildmergeError

SUBCOMMANDS = {
    "merge": ("wildmerge.commands.merge", "merge models from a mergekit recipe (all mergekit-yaml options work)"),
    "demo": ("wildmerge.commands.demo", "build the synthetic demo model family (the embedded default)"),
    "sample": ("wildmerge.commands.sample", "draw expert subsets from a pool and merge them with every method"),
    "eval": ("wildmerge.commands.eval", "score models with lm-eval on a suite (serial, Ray or Slurm)"),
    "report": ("wildmerge.commands.report", "write leaderboard tables and plots for a run"),
    "analyze": ("wildmerge.commands.analyze", "task-vector geometry and mergeability diagnostics"),
    "tune": ("wildmerge.commands.tune", "hyperparameters chosen by the task alignment score, without evaluation"),
    "search": ("wildmerge.commands.search", "the best merge a budget of evaluations can find (guided search)"),
}


def build_parser(only=None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wildmerge", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"wildmerge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only == name:  # import the module only for the subcommand that runs
            importlib.import_module(module).configure(p)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    parser = build_parser(only=command)
    if command is None:
        parser.parse_args(argv)  # handles --help / --version / unknown commands
        parser.print_help()
        return 2
    module = importlib.import_module(SUBCOMMANDS[command][0])
    args = parser.parse_args(argv)
    try:
        return int(module.run(args) or 0)
    except WildmergeError as exc:
        print(f"wildmerge {command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a read-only run folder: one line naming the path
        from wildmerge.atomic import storage_error

        if storage_error(exc) is None:
            raise
        print(f"wildmerge {command}: error: {storage_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"wildmerge {command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
