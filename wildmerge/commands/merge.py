"""``wildmerge merge RECIPE OUT [mergekit-yaml options]``: the stock ``mergekit-yaml`` with our methods.

Every ``mergekit-yaml`` option works (``--cuda``, ``--lazy-unpickle``, ``--out-shard-size`` ...). Our methods are
registered and recipes validated the same way as through the ``.pth`` hook, so this works from a source checkout
too.

Recipes of mergekit's own methods are checked the way the stock ``mergekit-yaml`` is (unknown parameters are
warnings: mergekit ignores what a method does not use), except that inputs it would merge silently into a broken
model (NaN/Inf weights, pickle-only or mismatched checkpoints) are refused. ``--strict`` also refuses unknown or
out-of-range parameters; recipes of wildmerge's methods are always checked strictly.
"""

import argparse
from pathlib import Path

from wildmerge.errors import WildmergeError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="mergekit YAML recipe")
    parser.add_argument("out_path", help="output folder (written atomically: complete or absent)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing, non-empty output folder")
    parser.add_argument("--strict", action="store_true",
                        help="refuse unknown or out-of-range parameters for mergekit's own methods too (default: "
                             "a warning, as mergekit ignores them); wildmerge's methods are always strict")
    parser.add_argument("mergekit_options", nargs=argparse.REMAINDER, help="any mergekit-yaml option")


def run(args) -> int:
    if not Path(args.recipe).is_file():
        raise WildmergeError(f"recipe {args.recipe!r} not found")
    out = Path(args.out_path)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise WildmergeError(f"{out} exists and is not empty; pass --overwrite to replace it")
    from wildmerge import _autoload

    _autoload.install()  # no-op when the .pth hook already ran
    import mergekit.merge  # noqa: F401  (runs our hooks)
    from mergekit.scripts.run_yaml import main as mergekit_yaml

    from wildmerge.atomic import atomic_dir
    from wildmerge.plugins.entrypoint import wildmerge_checks

    with wildmerge_checks(strict_params=args.strict), atomic_dir(out) as tmp:
        mergekit_yaml.main([args.recipe, str(tmp), *args.mergekit_options], standalone_mode=False)
    print(f"merged model written to {out}")
    return 0
