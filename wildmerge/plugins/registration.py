"""Register wildmerge's per-tensor methods in mergekit's registry (called by the autoload hook).

If a future mergekit ships a method under one of our names, mergekit's own wins (we never replace a built-in);
ours stays reachable as ``wildmerge_<name>`` and a warning says so.
"""

import logging

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


def on_merge_methods_imported(module) -> None:
    register_all()
