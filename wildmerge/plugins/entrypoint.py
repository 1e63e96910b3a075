"""The door every mergekit merge goes through once wildmerge is installed.

``wildmerge._autoload`` calls ``on_merge_module_imported`` right after ``mergekit.merge`` is imported, before
``mergekit-yaml`` binds ``run_merge``. We wrap ``run_merge`` so that:

1. layer-sequential methods that cannot be written as a per-tensor mergekit method (Chain of Merges, RegMean)
   are handed to their own driver, so the same YAML works with the stock ``mergekit-yaml``;
2. recipes for our methods are checked strictly before any tensor is loaded (mergekit ignores a misspelled key
   silently), and so are the checkpoints they name;
3. a recipe of one of mergekit's own methods merges exactly as it would without wildmerge: what we would object
   to is printed as a warning on stderr, never raised, unless a wildmerge command asked for checks
   (``wildmerge_checks``: ``wildmerge merge`` and the sampler), which turns them into errors.

``mergekit.merge`` plans with ``tensors_side_by_side.SideBySidePlanner``: for our methods on a CPU it merges runs of
neighbouring tensors side by side (mergekit's plan otherwise, and always for mergekit's own methods). Both changes
go through ``host_patches`` (the list of every change wildmerge makes to mergekit and lm-eval).
"""

import contextlib
import contextvars
import dataclasses
import functools
import os
from pathlib import Path

from wildmerge.errors import WildmergeError
from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS


@dataclasses.dataclass(frozen=True)
class Checks:
    """What is an error (True) or a warning (False) for a recipe of one of mergekit's own methods."""

    params: bool = False  # unknown parameters, values outside their range
    inputs: bool = False  # unknown recipe keys, pickle-only or incompatible checkpoints, NaN/Inf in the merge


GUEST = Checks()  # the stock mergekit-yaml and mergekit's Python API: mergekit's behaviour, plus warnings
STRICT = Checks(params=True, inputs=True)  # our own methods, always
_checks = contextvars.ContextVar("wildmerge_checks", default=GUEST)


@contextlib.contextmanager
def wildmerge_checks(strict_params: bool = False):
    """Within this block, merges of mergekit's methods refuse bad inputs (and, with ``strict_params``, unknown or
    out-of-range parameters) instead of warning: for wildmerge's own commands, which promise checked merges. TIES's
    trim selects in linear time there (``trim.py``: ties at the cut kept lowest index first), and the inputs mergekit
    opened are closed at the end (a run merges many models in one process)."""
    from mergekit.io.tasks import LoaderCache

    from wildmerge.plugins.trim import linear_time_trim

    token = _checks.set(Checks(params=strict_params, inputs=True))
    try:
        with linear_time_trim():
            yield
    finally:
        _checks.reset(token)
        LoaderCache().flush_all()  # mergekit keeps each input's last shard open: its pages would stay in memory


def _local_inputs(merge_config):
    """(reference folder, {expert: folder}) of the local, non-LoRA inputs; (None, {}) when the base is not local
    or the recipe takes slices or modules (a layer-range recipe may combine models of different depths: mergekit
    checks each slice). Hub ids are left to mergekit."""
    base = merge_config.base_model
    if merge_config.slices or merge_config.modules or base is None or base.lora is not None or not Path(base.model.path).is_dir():
        return None, {}
    experts = {str(ref): ref.model.path for ref in merge_config.referenced_models()
               if ref != base and ref.lora is None and Path(ref.model.path).is_dir()}
    return base.model.path, experts


def _aligns_vocabularies(merge_config, options) -> bool:
    return bool(merge_config.tokenizer or merge_config.tokenizer_source
                or getattr(options, "unsafe_truncate_embeddings", False))


def check_local_checkpoints(merge_config, options) -> None:
    """Architecture, tensor shapes and safetensors-only weights of local inputs, from headers (milliseconds), so a
    checkpoint mergekit cannot merge (or a pickle-only one) is named before mergekit loads anything.

    Vocabularies of different sizes pass when the recipe aligns them (``tokenizer:`` / ``tokenizer_source:``,
    or ``--unsafe-truncate-embeddings``); without that, mergekit cannot merge the embeddings, and we say how to
    fix the recipe. Pickle-only checkpoints are refused unless the user opts in with mergekit's
    ``--lazy-unpickle`` (what ``wildmerge sample --allow-pickle`` passes) or ``WILDMERGE_ALLOW_PICKLE=1``."""
    from wildmerge.checkpoints import check_compatible

    base, experts = _local_inputs(merge_config)
    if base is None:
        return
    allow_pickle = os.environ.get("WILDMERGE_ALLOW_PICKLE", "") == "1" or bool(getattr(options, "lazy_unpickle", 0))
    vocab_differs = check_compatible(base, experts, allow_pickle=allow_pickle)
    if vocab_differs and not _aligns_vocabularies(merge_config, options):
        listed = "; ".join(f"{name}: {v} tokens vs base {b}" for name, (v, b) in vocab_differs.items())
        raise WildmergeError(
            f"vocabularies differ ({listed}) and the recipe does not say how to align them; add `tokenizer: "
            f"{{source: base}}` (keep the base's tokens) or `tokenizer: {{source: union}}` to the recipe")


def check_finite_output(merge_config, out_path) -> None:
    """Raise naming tensor and model when the merged checkpoint holds NaN or Inf (mergekit's own methods merge
    NaN inputs without a word). Reads the output once, then only the offending tensors of each input."""
    from wildmerge.checkpoints import nonfinite_sources, nonfinite_tensors

    try:
        bad = nonfinite_tensors(out_path)
    except WildmergeError:
        return  # no safetensors output (pickle output was asked for): nothing cheap to check
    if not bad:
        return
    models = {str(ref): ref.model.path for ref in merge_config.referenced_models()
              if ref.lora is None and Path(ref.model.path).is_dir()}
    sources = nonfinite_sources(bad[:20], models)
    named = [f"{t} (from {', '.join(sources.get(t) or ['no input: the merge itself overflowed'])})" for t in bad[:3]]
    raise WildmergeError(
        f"the merge of {merge_config.merge_method!r} holds NaN or Inf in {len(bad)} tensor(s), e.g. "
        + "; ".join(named) + ". Remove or repair the named input checkpoint(s) and merge again")


def _checked(check, strict: bool, *args) -> None:
    """Run ``check``; as a guest, print its objection as a warning instead of raising it."""
    from wildmerge.plugins.validation import warn

    try:
        check(*args)
    except WildmergeError as exc:
        if strict:
            raise
        warn(f"{exc} (mergekit continues as it would without wildmerge)")


def _no_family_refs(merge_config) -> None:
    """``demo:`` / ``smollm2:`` models in a recipe (stock ``mergekit-yaml`` too): one message saying what to write,
    not the hub's OSError about a repo id."""
    from wildmerge.hub import FAMILY_PREFIXES, family_ref_in_recipe

    for ref in merge_config.referenced_models():
        if str(ref.model.path).startswith(FAMILY_PREFIXES):
            raise WildmergeError(family_ref_in_recipe(str(ref.model.path)))


def wrap_run_merge(original):
    """mergekit's ``run_merge`` behind wildmerge's checks and routes (``host_patches``: mergekit.merge.run_merge)."""

    @functools.wraps(original)
    def run_merge(merge_config, out_path, options, config_source=None):
        from wildmerge.plugins.registration import register_all
        from wildmerge.plugins.validation import is_ours, validate_merge_config, validate_recipe_source

        register_all()  # idempotent; covers a process whose registration hook had to wait
        _no_family_refs(merge_config)
        method = merge_config.merge_method
        checks = STRICT if is_ours(method) else _checks.get()
        if config_source is not None:
            validate_recipe_source(config_source, strict=checks.inputs)
        if method in LAYERWISE_METHODS:
            from wildmerge.plugins.layerwise.driver import run_layerwise_merge

            return run_layerwise_merge(merge_config, out_path, options, config_source)
        validate_merge_config(merge_config, strict=checks.params)
        _checked(check_local_checkpoints, checks.inputs, merge_config, options)
        result = original(merge_config, out_path, options, config_source=config_source)
        if not is_ours(method):  # our kernels refuse NaN/Inf inputs themselves, before any maths
            _checked(check_finite_output, checks.inputs, merge_config, out_path)
        return result

    return run_merge


def on_merge_module_imported(module) -> None:
    """Right after ``mergekit.merge`` is imported: its two changes, through the one door (``host_patches``)."""
    from wildmerge.plugins import host_patches
    from wildmerge.plugins.tensors_side_by_side import side_by_side_planner

    host_patches.replace("mergekit.merge.run_merge", wrap_run_merge)
    host_patches.replace("mergekit.merge.MergePlanner", side_by_side_planner)
