"""The door every mergekit merge goes through once wildmerge is installed.

``wildmerge._autoload`` calls ``on_merge_module_imported`` right after ``mergekit.merge`` is imported, before
``mergekit-yaml`` binds ``run_merge``. We wrap ``run_merge`` so that, for every recipe:

1. parameters are checked strictly before any tensor is loaded (mergekit ignores a misspelled key silently);
2. layer-sequential methods that cannot be written as a per-tensor mergekit method (Chain of Merges, RegMean)
   are handed to their own driver, so the same YAML works with the stock ``mergekit-yaml``.
"""

import functools

from wildmerge.plugins.layerwise_methods import LAYERWISE_METHODS


def check_local_checkpoints(merge_config, options) -> None:
    """Shapes, architecture and safetensors-only weights of local inputs, from headers (milliseconds), so a
    mismatched or pickle-only expert is named before mergekit loads anything. Hub ids are left to mergekit.

    Checkpoints from the wild are untrusted: pickle-only ones are refused unless the user opts in with mergekit's
    ``--lazy-unpickle`` (what ``wildmerge sample --allow-pickle`` passes) or ``WILDMERGE_ALLOW_PICKLE=1``."""
    import os
    from pathlib import Path

    from wildmerge.checkpoints import check_compatible

    base = merge_config.base_model
    if base is None or base.lora is not None or not Path(base.model.path).is_dir():
        return
    experts = {}
    for ref in merge_config.referenced_models():
        if ref != base and ref.lora is None and Path(ref.model.path).is_dir():
            experts[str(ref)] = ref.model.path
    allow_pickle = os.environ.get("WILDMERGE_ALLOW_PICKLE", "") == "1" or bool(getattr(options, "lazy_unpickle", 0))
    check_compatible(base.model.path, experts, allow_pickle=allow_pickle)


def wrap_run_merge(original):
    if getattr(original, "__wildmerge_wrapped__", False):
        return original

    @functools.wraps(original)
    def run_merge(merge_config, out_path, options, config_source=None):
        from wildmerge.plugins.validation import validate_merge_config, validate_recipe_source

        if config_source is not None:
            validate_recipe_source(config_source)
        method = merge_config.merge_method
        if method in LAYERWISE_METHODS:
            from wildmerge.plugins.layerwise import run_layerwise_merge

            return run_layerwise_merge(merge_config, out_path, options, config_source)
        validate_merge_config(merge_config)
        check_local_checkpoints(merge_config, options)
        return original(merge_config, out_path, options, config_source=config_source)

    run_merge.__wildmerge_wrapped__ = True
    return run_merge


def on_merge_module_imported(module) -> None:
    module.run_merge = wrap_run_merge(module.run_merge)
