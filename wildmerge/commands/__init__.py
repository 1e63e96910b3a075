"""The ``wildmerge`` subcommands: argument parsing and orchestration, nothing else.

Each module exposes ``configure(parser)`` and ``run(args) -> int``. Commands sit at the top of the import graph:
they call the packages (plugins, sampling, eval, analysis, demo), never the other way round. Only ``sample`` chains
the stages (sample -> merge -> eval -> report).
"""
