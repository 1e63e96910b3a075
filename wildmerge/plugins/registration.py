"""Register wildmerge's per-tensor methods in mergekit's registry (called by the autoload hook).

If a future mergekit ships a method under one of our names, mergekit's own wins (we never replace a built-in);
ours stays reachable as ``wildmerge_<name>`` and a warning says so.
"""

import logging
import sys

log = logging.getLogger("wildmerge")


def register_all() -> dict:
    """Register every wildmerge method; returns {our method name: name it is registered under}."""
    from mergekit.merge_methods import registry

    from wildmerge.plugins.methods import ALL_METHODS
    from wildmerge.plugins.norm_methods import NORM_METHODS

    present = {m.spec.name: m for m in registry.registered_methods()}
    names = {}
    for method in ALL_METHODS + NORM_METHODS:
        ours = name = method.spec.name
        if name in present and not getattr(present[name], "__wildmerge__", False):
            alias = f"wildmerge_{name}"
            log.warning("mergekit already has a merge method %r: mergekit's wins; wildmerge's is %r", name, alias)
            method, name = method.renamed(alias), alias
        if name not in present:
            registry.register(method)
        names[ours] = name
    return names


def _half_imported(name: str) -> bool:
    """True while ``name`` is being executed by the import system (importlib sets ``__spec__._initializing``)."""
    module = sys.modules.get(name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def on_merge_methods_imported(module) -> None:
    # `import wildmerge.plugins.methods` first imports mergekit: our module is then half-imported and cannot be
    # read yet; on_our_methods_imported registers as soon as it is complete.
    if _half_imported("wildmerge.plugins.methods"):
        return
    register_all()


def on_our_methods_imported(module) -> None:
    if "mergekit.merge_methods" in sys.modules:
        register_all()
