"""Imports run one way: commands -> packages -> the run-folder contract and the checkpoints layer (ARCHITECTURE.md).

Every ``import`` inside ``wildmerge/`` is read from the source (function-level imports included), so a lazy import
cannot hide an upward dependency or a cycle.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "wildmerge"

# Lower numbers sit lower. A module may import its own package and anything strictly lower; bottom modules (0)
# may import each other as long as there is no cycle.
LEVELS = {"bottom": 0, "plugins": 1, "pools": 1,
          "recipes": 2,  # method recipes: read by planning, merging, eval and analysis; the merge methods need none
          "planning": 3, "merging": 3, "eval": 3, "analysis": 4, "protocol": 5,
          "cluster": 4,  # a merged model as one cluster job: merging and eval together, below the protocol
          "search": 5,  # the guided search drives tuning, merging and evaluation like the protocol does
          "families": 1,  # the embedded model families (demo/, smollm2/) and what they share
          "commands": 6, "api": 6,  # the Python API: beside the commands, over the same packages
          "cli": 7}
# hub.py resolves ``demo:<name>`` and ``smollm2:<name>`` references by calling into the embedded families, which
# import nothing but bottom modules
EXCEPTIONS = {("wildmerge.hub", "wildmerge.families")}
# wildmerge/__init__.py hands out the Python API on the first use of one of its names, never at import (the package
# is imported at every start-up): not an import-time edge, so neither a layer nor a cycle question
LAZY = {("wildmerge", "wildmerge.api")}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)  # `from wildmerge.x import module`


def _modules() -> dict:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _graph():
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        targets = {t for t in _imports(path) if t.startswith("wildmerge")}
        graph[name] = {t for t in targets if t in modules and t != name and (name, t) not in LAZY}
    return graph


def _packages() -> set:
    return {name for name, path in _modules().items() if path.name == "__init__.py"}


def _group(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "bottom"
    if parts[1] in LEVELS:
        return parts[1]
    return "bottom"  # wildmerge.run, .hub, .checkpoints, .errors, .atomic, .paths, .resources, .threads, ._autoload


def test_the_layer_table_covers_every_module():
    groups = {_group(m) for m in _graph()}
    assert groups <= set(LEVELS), groups - set(LEVELS)
    assert {"families", "plugins", "pools", "recipes", "planning", "merging", "eval", "analysis", "protocol", "commands"} <= groups


def _excepted(module: str, target: str) -> bool:
    return any(module == a and (target == b or target.startswith(b + ".")) for a, b in EXCEPTIONS)


def upward_imports(graph) -> list:
    wrong = []
    for module, targets in graph.items():
        for target in targets:
            src, dst = _group(module), _group(target)
            if src != dst and LEVELS[dst] >= LEVELS[src] and not _excepted(module, target):
                wrong.append(f"{module} ({src}) imports {target} ({dst})")
    return sorted(wrong)


def test_no_import_runs_upwards_or_sideways():
    graph = _graph()
    assert "wildmerge.planning.plan" in graph["wildmerge.protocol"]  # the graph sees function-level imports
    assert upward_imports({"wildmerge.eval.evaluate": {"wildmerge.analysis.report.write"}})  # and the rule bites
    assert upward_imports({"wildmerge.planning.plan": {"wildmerge.eval.store"}})
    wrong = upward_imports(graph)
    assert not wrong, "\n".join(wrong)


def _cycles(graph) -> list:
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def _child(package: str, module: str) -> str | None:
    """The folder or module directly inside ``package`` that holds ``module`` (None: outside, or the package)."""
    if not module.startswith(package + "."):
        return None
    return f"{package}.{module[len(package) + 1:].split('.')[0]}"


def folder_cycles(graph, packages) -> list:
    """Cycles between the folders and modules directly inside each package: a module-level graph without a cycle
    can still run back up between two folders (``eval/worker.py`` -> ``eval/screening/`` -> ``eval/worker.py``)."""
    found = []
    for package in sorted(packages):
        folders = {}
        for module, targets in graph.items():
            source = _child(package, module)
            for target in targets:
                dest = _child(package, target)
                if source and dest and source != dest:
                    folders.setdefault(source, set()).add(dest)
        found += _cycles(folders)
    return found


def test_no_folder_inside_a_package_imports_in_a_cycle():
    worker_and_screening = {"wildmerge.eval.worker": {"wildmerge.eval.screening.parts"},
                            "wildmerge.eval.screening.stages": {"wildmerge.eval.worker"},
                            "wildmerge.eval.screening.parts": set()}
    assert folder_cycles(worker_and_screening, {"wildmerge.eval", "wildmerge.eval.screening"})  # the rule bites
    assert not _cycles(worker_and_screening)  # where the module graph sees none
    cycles = folder_cycles(_graph(), _packages())
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def private_imports(imports: dict, packages) -> list:
    """``_name`` helpers (a private function or module) imported from another folder of the same package: what a
    folder shares must be public (``analysis/plotting.py``), not borrowed from a sibling's internals."""
    wrong = []
    for module, names in imports.items():
        home = module if module in packages else module.rpartition(".")[0]
        for name in names:
            parts = name.split(".")
            private = next((i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")),
                           None)
            if private is None:
                continue
            owner = ".".join(parts[:private])
            folder = owner if owner in packages else owner.rpartition(".")[0]
            if folder != home and folder.split(".")[:2] == home.split(".")[:2] and len(home.split(".")) > 1:
                wrong.append(f"{module} imports {name}")
    return sorted(wrong)


def test_no_folder_borrows_another_folders_private_helpers():
    packages = _packages()
    assert private_imports({"wildmerge.analysis.pool.geometry": {"wildmerge.analysis.report.plots._save"}},
                           packages)  # the rule bites
    assert not private_imports({"wildmerge.eval.composition": {"wildmerge.eval.features._padded"}},
                               packages)  # a folder's own modules may share
    imports = {name: {t for t in _imports(path) if t.startswith("wildmerge")} for name, path in _modules().items()}
    wrong = private_imports(imports, packages)
    assert not wrong, "\n".join(wrong)


def commands_importing_commands(graph) -> list:
    """A command is a leaf: it may share ``commands.options``, never call another command."""
    shared = {"wildmerge.commands", "wildmerge.commands.options"}
    return sorted(f"{module} imports {target}" for module, targets in graph.items()
                  if module.startswith("wildmerge.commands.") and module not in shared
                  for target in targets if target.startswith("wildmerge.commands.") and target not in shared)


def test_no_command_imports_another():
    assert commands_importing_commands({"wildmerge.commands.demo": {"wildmerge.commands.sample"}})  # the rule bites
    graph = _graph()
    assert "wildmerge.commands.options" in graph["wildmerge.commands.sample"]  # sharing options is fine
    wrong = commands_importing_commands(graph)
    # `analyze` is the one dispatcher: its sub-analyses are listed as module names, imported with importlib
    assert not wrong, "\n".join(wrong)


def test_the_helper_module_of_commands_is_no_subcommand():
    from wildmerge.cli import SUBCOMMANDS

    assert all(module != "wildmerge.commands.options" for module, _ in SUBCOMMANDS.values())


@pytest.mark.parametrize("bottom", ["wildmerge.run", "wildmerge.hub", "wildmerge.checkpoints"])
def test_the_contract_modules_import_no_package(bottom):
    targets = {_group(t) for t in _graph()[bottom] if not _excepted(bottom, t)}
    assert targets <= {"bottom"}, targets


# --- the run-folder contract: every path under RUN/ comes from run.RunFolder -----------------------------------

# Folders that are not run folders but reuse a name of its layout, with why; everything else that joins one of the
# names below onto a path is building a run-folder path by hand.
OWN_LAYOUTS = {
    ("wildmerge/families/", "calibration"): "an embedded family's cache folder holds its experts' calibration text",
    ("wildmerge/analysis/tas/", "calibration"): "TAS's working folder (`wildmerge tune --out`, or RUN/tune/ whole)",
    ("wildmerge/analysis/tas/", "models"): "TAS's working folder: the checked grid points",
    ("wildmerge/analysis/tas/", "eval"): "TAS's working folder: the checked grid points' scores",
    ("wildmerge/analysis/mergeability/pool_metrics.py", "mergeability"): "its own output folder, runs/analysis-<pool>/",
    ("wildmerge/analysis/mergeability/pool_metrics.py", "calibration"): "its own output folder, runs/analysis-<pool>/",
}


def run_folder_names() -> set:
    """The first name of every path a ``RunFolder`` hands out: its attributes and its path methods (called with a
    placeholder), so a folder or file added to the layout is guarded without touching this test."""
    import inspect

    from wildmerge.run import RunFolder

    run = RunFolder("/run")
    paths = [v for v in vars(run).values() if isinstance(v, Path)]
    for name, method in inspect.getmembers(RunFolder, inspect.isfunction):
        signature = inspect.signature(method)
        params = list(signature.parameters.values())[1:]
        if signature.return_annotation is Path and all(p.annotation is str for p in params):
            paths.append(method(run, *["PLACEHOLDER"] * len(params)))
    return {p.relative_to(run.root).parts[0] for p in paths if p != run.root}


def hand_built_run_paths(path: Path, source: str, names: set) -> list:
    """``x / "models"``, ``Path(x, "report")``, ``os.path.join(x, "plan.json")``, ``x.joinpath("eval")``, and any
    string that is exactly a run-folder file name ("plan.json", "search.json"), in one module's source."""
    where = path.relative_to(ROOT.parent).as_posix()
    found = []

    def flag(node):
        if isinstance(node, ast.Constant) and node.value in names and not any(
                where.startswith(prefix) and node.value == n for prefix, n in OWN_LAYOUTS):
            found.append(f"{where}:{node.lineno}: {node.value!r}")

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            flag(node.right)
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            joined = node.args[1:] if func in ("Path", "pathlib.Path", "os.path.join") else \
                node.args if func.endswith(".joinpath") else []
            for arg in joined:
                flag(arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            flag(node)  # a file of the layout, e.g. compared or formatted into a path
    return sorted(set(found))


def test_no_code_outside_run_py_builds_a_run_folder_path():
    names = run_folder_names()
    assert {"plan.json", "manifest.json", "models", "eval", "report", "search.json", "search", "probe",
            "mergeability", "calibration"} <= names  # the names come from RunFolder itself
    bad = "def f(run_dir, folder):\n    a = Path(run_dir) / 'models' / 'x'\n    b = Path(run_dir, 'report')\n" \
          "    c = folder.search_dir.joinpath('eval')\n    return 'search.json'\n"
    assert len(hand_built_run_paths(ROOT / "x.py", bad, names)) == 4  # the rule bites
    wrong = [line for path in sorted(ROOT.rglob("*.py")) if path != ROOT / "run.py"
             for line in hand_built_run_paths(path, path.read_text(), names)]
    assert not wrong, "build these paths with a RunFolder attribute or method (wildmerge/run.py):\n" + "\n".join(wrong)
