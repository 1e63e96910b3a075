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
import os
from pathlib import Path

from wildmerge.errors import WildmergeError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="mergekit YAML recipe")
    parser.add_argument("out_path", help="output folder (written atomically: complete or absent)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing, non-empty output folder")
    parser.add_argument("--strict", action="store_true",
                        help="refuse unknown or out-of-range parameters for mergekit's own methods too (default: "
                             "a warning, as mergekit ignores them); wildmerge's methods are always strict")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="accept checkpoints that ship only pickle weights (they can run code when loaded)")
    parser.add_argument("mergekit_options", nargs=argparse.REMAINDER, help="any mergekit-yaml option")


OUR_FLAGS = ("--overwrite", "--allow-pickle", "--strict")


def _own_flags_anywhere(args) -> list:
    """Our flags also after the paths (``merge R OUT --overwrite``), where argparse's REMAINDER swallows them."""
    rest = []
    for option in args.mergekit_options:
        if option in OUR_FLAGS:
            setattr(args, option[2:].replace("-", "_"), True)
        else:
            rest.append(option)
    return rest


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise WildmergeError(f"output path {out} is a file; give a folder path")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise WildmergeError(f"{out} exists and is not empty; pass --overwrite to replace it")
    parent = next((p for p in [out, *out.parents] if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise WildmergeError(f"cannot write {out}: {parent} is not a writable folder; choose another output path")


def _check_hub_models(raw: dict, allow_pickle: bool) -> None:
    """Hub models of the recipe in the local cache (fetched now when online): an uncached one offline is one line
    with the command that fetches it, not mergekit's traceback from deep in transformers, with or without --cuda."""
    from mergekit.config import MergeConfiguration

    from wildmerge.hub import classify, resolve_path

    for ref in MergeConfiguration.model_validate(raw).referenced_models():
        for model in filter(None, (ref.model, ref.lora)):
            if classify(str(model.path))[0] == "hub":
                resolve_path(str(model.path), model.revision, allow_pickle=allow_pickle)


def run(args) -> int:
    options = _own_flags_anywhere(args)
    out = Path(args.out_path)
    _check_out(out, args.overwrite)
    from wildmerge.recipes.recipe_file import check_recipe_file

    raw = check_recipe_file(args.recipe)
    _check_hub_models(raw, args.allow_pickle)
    if args.allow_pickle:
        os.environ["WILDMERGE_ALLOW_PICKLE"] = "1"  # read by the checkpoint check of every merge
    from wildmerge import _autoload

    _autoload.install()  # no-op when the .pth hook already ran
    import mergekit.merge  # noqa: F401  (runs our hooks)
    from mergekit.scripts.run_yaml import main as mergekit_yaml

    from wildmerge.atomic import atomic_dir
    from wildmerge.plugins.entrypoint import wildmerge_checks
    from wildmerge.threads import blas_threads

    # one thread per tensor: the merged bytes never depend on the cores or the load (mergekit's own reductions,
    # e.g. Model Stock's, round otherwise on two threads); wildmerge's methods still merge tensors side by side
    with wildmerge_checks(strict_params=args.strict), atomic_dir(out) as tmp, blas_threads(1):
        mergekit_yaml.main([args.recipe, str(tmp), *options], standalone_mode=False)
    print(f"merged model written to {out}")
    return 0
