"""Register wildmerge's per-tensor methods in mergekit's registry (called by the autoload hook).

If a future mergekit ships a method under one of our names, mergekit's own wins (we never replace a built-in);
ours stays reachable as ``wildmerge_<name>`` and a warning says so once.
"""

import logging

log = logging.getLogger("wildmerge")


def register_all() -> dict:
    """Register every wildmerge method; returns {name we asked for: name it is registered under}."""
    from mergekit.merge_methods import registry

    from wildmerge.plugins.methods import ALL_METHODS

    names = {}
    for method in ALL_METHODS:
        name = method.spec.name
        existing = registry._METHODS.get(name)
        if existing is method:
            names[name] = name
            continue
        if existing is not None and not getattr(existing, "__wildmerge__", False):
            alias = f"wildmerge_{name}"
            log.warning("mergekit already has a merge method %r; mergekit's wins, wildmerge's is %r", name, alias)
            method = method.renamed(alias)
            name = alias
        registry._METHODS[name] = method
        names[method.spec.name] = name
    return names


def on_merge_methods_imported(module) -> None:
    register_all()
