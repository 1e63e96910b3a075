"""Make the stock ``mergekit-yaml`` (and mergekit's Python API) see wildmerge's methods.

mergekit 0.1.5 has no plugin discovery. ``wildmerge_autoload.pth`` in site-packages imports this module at
interpreter start-up; it installs a tiny import hook that waits for mergekit's own modules to be imported and
then runs our post-import hooks:

- after ``mergekit.merge_methods``: register our per-tensor methods (``wildmerge.plugins.registration``);
- after each module of our methods (``registration.METHOD_MODULES``): the same, for a process that imported it
  before mergekit (mergekit's hook then finds it half-imported and leaves its registration to this one);
- after ``mergekit.merge``: wrap ``run_merge`` so recipes for our methods are validated strictly (mergekit
  silently ignores misspelled parameters) and layer-sequential methods (Chain of Merges, RegMean) are routed to
  their own driver; and plan with ``tensors_side_by_side.SideBySidePlanner``, which merges neighbouring tensors
  side by side for our methods on a CPU. Recipes of mergekit's own methods merge exactly as without wildmerge
  (warnings only; mergekit's own plan). Both are listed in ``plugins/host_patches.CHANGES`` and applied through it.

``WILDMERGE_AUTOLOAD=0`` in the environment turns the hook off (mergekit then runs as if wildmerge were not
installed; CI compares mergekit's own test suite both ways).

This file must stay torch-free and cheap: it runs in every Python process of the environment.
"""

import importlib
import os
import sys

_POST_IMPORT_HOOKS = {
    "mergekit.merge_methods": ("wildmerge.plugins.registration", "on_merge_methods_imported"),
    "wildmerge.plugins.methods": ("wildmerge.plugins.registration", "on_our_methods_imported"),
    "wildmerge.plugins.norm_methods": ("wildmerge.plugins.registration", "on_our_methods_imported"),
    "wildmerge.plugins.baselines": ("wildmerge.plugins.registration", "on_our_methods_imported"),
    "wildmerge.plugins.lines": ("wildmerge.plugins.registration", "on_our_methods_imported"),
    "wildmerge.plugins.knots": ("wildmerge.plugins.registration", "on_our_methods_imported"),
    "wildmerge.plugins.localize_stitch": ("wildmerge.plugins.registration", "on_our_methods_imported"),
    "mergekit.merge": ("wildmerge.plugins.entrypoint", "on_merge_module_imported"),
}


def _run_hook(fullname: str, module) -> None:
    hook_module, hook_name = _POST_IMPORT_HOOKS[fullname]
    try:
        getattr(importlib.import_module(hook_module), hook_name)(module)
    except Exception as exc:  # never break mergekit itself because of us
        print(f"wildmerge: could not hook into {fullname}: {exc!r}", file=sys.stderr)


class _HookingLoader:  # duck-typed importlib Loader (importlib.abc would cost ~25 ms at every start-up)
    def __init__(self, fullname, loader):
        self._fullname, self._loader = fullname, loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _run_hook(self._fullname, module)

    def __getattr__(self, name):  # get_resource_reader, is_package, ... from the real loader
        return getattr(self._loader, name)


class _PostImportFinder:  # duck-typed importlib MetaPathFinder
    def find_spec(self, fullname, path, target=None):
        if fullname not in _POST_IMPORT_HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _HookingLoader):
                    spec.loader = _HookingLoader(fullname, spec.loader)
                return spec
        return None


def enabled() -> bool:
    return os.environ.get("WILDMERGE_AUTOLOAD", "1").strip().lower() not in ("0", "false", "no", "off")


def install() -> None:
    """Install the hook once; if mergekit was imported before us, run the hooks right away."""
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())
    for fullname in _POST_IMPORT_HOOKS:
        if fullname in sys.modules:
            _run_hook(fullname, sys.modules[fullname])


if enabled():
    install()
