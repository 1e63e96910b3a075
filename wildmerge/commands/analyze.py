"""``wildmerge analyze ANALYSIS ...``: diagnostics of a pool or a run, one module per analysis.

Each analysis module (``commands/analyze_<name>.py``) has ``HELP``, ``DESCRIPTION``, ``configure(parser)`` and
``run(args)``; add a line to ``ANALYSES`` to add one.
"""

import argparse
import importlib

ANALYSES = {
    "geometry": "wildmerge.commands.analyze_geometry",
    "norms": "wildmerge.commands.analyze_norms",
    "mergeability": "wildmerge.commands.analyze_mergeability",
    "predictor": "wildmerge.commands.analyze_predictor",
    "probe": "wildmerge.commands.analyze_probe",
    "probe-families": "wildmerge.commands.analyze_probe_families",
    "tas": "wildmerge.commands.analyze_tas",
    "importance": "wildmerge.commands.analyze_importance",
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    for name, module_name in ANALYSES.items():
        module = importlib.import_module(module_name)
        module.configure(sub.add_parser(name, help=module.HELP, description=module.DESCRIPTION))


def run(args) -> int:
    return importlib.import_module(ANALYSES[args.analysis]).run(args)
