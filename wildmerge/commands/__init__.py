"""The ``wildmerge`` subcommands: argument parsing, nothing else.

Each module exposes ``configure(parser)`` and ``run(args) -> int``, which turns the arguments into a library call
(``sample``, ``eval`` and ``demo report`` call ``wildmerge.protocol``, the driver that chains the stages). Commands
sit at the top of the import graph and never import each other; what several share (argument types, the evaluation
options) is in ``commands/options.py``, which is not a subcommand.
"""
