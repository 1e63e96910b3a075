"""Register wildmerge's per-tensor methods in mergekit's registry (called by the autoload hook).

If a future mergekit ships a method under one of our names, mergekit's own wins (we never replace a built-in);
ours stays reachable as ``wildmerge_<name>`` and a warning says so.

Our methods live in several modules, any of which may be imported first (and import mergekit half-way through):
each registration takes the modules that are complete and skips one still being imported; the autoload hook runs
again when that module is done, so every method ends up registered whatever the import order.
"""

import importlib
import logging
import sys

log = logging.getLogger("wildmerge")

# The registry list: every module of wildmerge's per-tensor methods, each exporting ``METHODS`` (registered in this
# order). The layer-wise methods (RegMean, Chain of Merges) are no mergekit methods: ``layerwise/methods.py`` lists
# them for the entry point. ``_autoload.py`` hooks the same modules (a test keeps the two lists equal).
METHOD_MODULES = (
    "wildmerge.plugins.methods",
    "wildmerge.plugins.norm_methods",
    "wildmerge.plugins.baselines",
    "wildmerge.plugins.lines",
    "wildmerge.plugins.knots",
    "wildmerge.plugins.localize_stitch",
)


def our_methods() -> list:
    """Every wildmerge per-tensor method, in registration order."""
    return [m for module in METHOD_MODULES for m in importlib.import_module(module).METHODS]


def _importable_methods(complete: str = "") -> list:
    methods = []
    for module in METHOD_MODULES:
        if module != complete and _half_imported(module):
            continue
        try:
            methods += importlib.import_module(module).METHODS
        except ImportError:
            if not _any_of_ours_half_imported():
                raise
            # it needs a module of ours that is still being imported (a method module, or a shared one such as
            # task_vector_method imported first): registered when a method module's import ends, or by the
            # entry point's register_all() before any merge runs
    return methods


def _any_of_ours_half_imported() -> bool:
    return any(_half_imported(m) for m in list(sys.modules) if m.startswith("wildmerge."))


def register_all(complete: str = "") -> dict:
    """Register every wildmerge method that can be imported now; returns {our method name: registered name}.

    ``complete``: a module whose post-import hook is running (the import system still marks it as in progress)."""
    from mergekit.merge_methods import registry

    ours = _importable_methods(complete)
    present = {m.spec.name: m for m in registry.registered_methods()}
    names = {}
    for method in ours:
        own = name = method.spec.name
        if name in present and not getattr(present[name], "__wildmerge__", False):
            alias = f"wildmerge_{name}"
            log.warning("mergekit already has a merge method %r: mergekit's wins; wildmerge's is %r", name, alias)
            method, name = method.renamed(alias), alias
        if name not in present:
            registry.register(method)
            present[name] = method
        names[own] = name
    return names


def _half_imported(name: str) -> bool:
    """True while ``name`` is being executed by the import system (importlib sets ``__spec__._initializing``)."""
    module = sys.modules.get(name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def on_merge_methods_imported(module) -> None:
    register_all()


def on_our_methods_imported(module) -> None:
    if "mergekit.merge_methods" in sys.modules and not _half_imported("mergekit.merge_methods"):
        register_all(complete=module.__name__)
