"""Every change wildmerge makes to its hosts, mergekit and lm-eval, listed as data and applied through one door.

``CHANGES`` names each one: what it changes (``target``: a module attribute replaced, or a host registry added to),
why, how to run without it (``off``), the test that covers it, where it is applied (``applied_by``) and for how
long (``scope``). A replacement goes through ``replace`` (from then on in the process) or ``replaced`` (inside a
block only: re-entrant, any thread, the host's own back when the outermost block ends); both refuse a target that is
not listed here. One idempotence rule for all of them: the object put in place carries ``__wildmerge_patch__`` (its
target), so applying a change twice changes nothing, and ``original(target)`` is always the host's own object.
Registrations go through the hosts' own registration APIs (mergekit's method registry, lm-eval's
``register_model``) and are listed here too, so the list is the whole of what wildmerge changes.

tests/plugins/test_good_guest.py walks this list: every target exists in the installed host, every named test
exists, every replacement is applied once and is the host's own outside its scope.
"""

import contextlib
import dataclasses
import importlib
import sys
import threading
from typing import Any, Callable, Dict

MARK = "__wildmerge_patch__"


@dataclasses.dataclass(frozen=True)
class HostChange:
    target: str  # "module.attribute" replaced, or the host registry added to
    reason: str
    off: str  # how to run without it
    test: str  # "tests/<file>.py::<test>" that covers it
    applied_by: str  # "module:function" of wildmerge that applies it
    scope: str  # "process": from then on; "block": inside applied_by's block only; "registry": the host's own API


CHANGES = (
    HostChange("mergekit.merge.run_merge",
               "recipes of wildmerge's methods checked strictly before loading; RegMean / Chain of Merges routed to "
               "their own driver; mergekit's own methods merge as without wildmerge (objections are warnings)",
               "WILDMERGE_AUTOLOAD=0", "tests/plugins/test_good_guest.py::"
               "test_output_is_bit_identical_to_mergekit_without_wildmerge",
               "wildmerge.plugins.entrypoint:on_merge_module_imported", "process"),
    HostChange("mergekit.merge.MergePlanner",
               "neighbouring CPU matrices of wildmerge's per-tensor methods joined into one task merged side by side "
               "on the kernel pool; mergekit's plan for its own methods",
               "WILDMERGE_AUTOLOAD=0; for one merge WILDMERGE_LAPACK_THREADS=1 or --num-threads 1 keeps mergekit's "
               "plan", "tests/plugins/test_tensors_side_by_side.py::"
               "test_mergekit_yaml_writes_the_files_of_mergekits_plan_on_one_thread",
               "wildmerge.plugins.entrypoint:on_merge_module_imported", "process"),
    HostChange("mergekit.sparsify.magnitude",
               "TIES' trim selects in linear time instead of sorting every entry (ties at the cut: lowest index)",
               "only inside wildmerge's own merges; the stock mergekit-yaml keeps mergekit's sort",
               "tests/plugins/test_trim.py::test_only_inside_wildmerges_merges",
               "wildmerge.plugins.trim:linear_time_trim", "block"),
    HostChange("lm_eval.utils.apply_template",
               "each prompt template compiled once per process, not once per document (same text)",
               "only in wildmerge's evaluation workers; lm-eval run by itself keeps its own",
               "tests/eval/test_eval_templates.py::test_lm_eval_tasks_render_through_the_cache",
               "wildmerge.eval.templates:compile_templates_once", "process"),
    HostChange("lm_eval.evaluator.add_env_info",
               "the environment (torch's collect_env: subprocesses, pip) described once per long-lived worker, not "
               "once per job", "only in wildmerge's long-lived evaluation workers (eval/serve.py)",
               "tests/eval/test_eval_templates.py::test_a_workers_environment_is_described_once",
               "wildmerge.eval.serve:cache_env_info", "process"),
    HostChange("mergekit.merge_methods.registry",
               "wildmerge's per-tensor methods registered (mergekit's own method wins a name clash)",
               "WILDMERGE_AUTOLOAD=0", "tests/plugins/test_good_guest.py::"
               "test_hook_registers_our_methods_whatever_is_imported_first",
               "wildmerge.plugins.registration:register_all", "registry"),
    HostChange("lm_eval.api.registry.MODEL_REGISTRY",
               "the ensemble / composer baselines scored as an lm-eval model (wildmerge-composition)",
               "registered only when wildmerge scores a composition",
               "tests/analysis/test_probe_run.py::test_composition_model_scores_like_its_experts",
               "wildmerge.eval.composition_lm:register", "registry"),
)
_BY_TARGET = {c.target: c for c in CHANGES}
_originals: Dict[str, Any] = {}
_depth: Dict[str, int] = {}
_lock = threading.RLock()


def change(target: str) -> HostChange:
    """The listed change of ``target``; a target not in ``CHANGES`` is refused (every change is listed)."""
    if target not in _BY_TARGET:
        raise KeyError(f"{target} is not a listed host change: add it to wildmerge.plugins.host_patches.CHANGES")
    return _BY_TARGET[target]


def _where(target: str):
    name, _, attribute = target.rpartition(".")
    module = sys.modules.get(name)  # from a post-import hook the module is still marked as being imported
    return (module if module is not None else importlib.import_module(name)), attribute


def is_ours(obj) -> bool:
    return getattr(obj, MARK, None) is not None


def original(target: str):
    """The host's own object at ``target``, whether wildmerge's replacement is in place or not."""
    module, attribute = _where(target)
    current = getattr(module, attribute)
    return _originals[target] if getattr(current, MARK, None) == target else current


def _put(target: str, make: Callable[[Any], Any]) -> None:
    module, attribute = _where(target)
    current = getattr(module, attribute)
    if getattr(current, MARK, None) == target:
        return  # in place already
    replacement = make(current)
    setattr(replacement, MARK, target)
    _originals[target] = current
    setattr(module, attribute, replacement)


def replace(target: str, make: Callable[[Any], Any]) -> None:
    """Put ``make(host's own object)`` at ``target`` for the rest of the process (once: a second call does nothing)."""
    if change(target).scope != "process":
        raise ValueError(f"{target} is replaced inside a block only: use replaced()")
    with _lock:
        _put(target, make)


@contextlib.contextmanager
def replaced(target: str, make: Callable[[Any], Any]):
    """``make(host's own object)`` at ``target`` inside the block (re-entrant, any thread); the host's own object is
    back when the outermost block ends."""
    if change(target).scope != "block":
        raise ValueError(f"{target} is replaced for the whole process: use replace()")
    with _lock:
        _depth[target] = _depth.get(target, 0) + 1
        _put(target, make)
    try:
        yield
    finally:
        with _lock:
            _depth[target] -= 1
            if _depth[target] == 0:
                module, attribute = _where(target)
                setattr(module, attribute, _originals[target])
