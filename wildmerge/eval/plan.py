"""Read a run's ``plan.json`` (written by the sampler): the models to score and what each one is."""

import json
from pathlib import Path
from typing import Any, Dict, List

from wildmerge.errors import WildmergeError

KINDS = ("base", "expert", "merge")
REQUIRED = ("model_id", "kind", "path")


def load_plan(run_dir) -> List[Dict[str, Any]]:
    """The plan's entries, checked: ids unique, kinds known, exactly one base."""
    path = Path(run_dir) / "plan.json"
    if not path.is_file():
        raise WildmergeError(f"{run_dir} is not a run folder: plan.json is missing (create a run with "
                             f"`wildmerge sample`, or use `wildmerge eval --model PATH` for single models)")
    try:
        entries = json.loads(path.read_text())["entries"]
    except (ValueError, KeyError, TypeError) as exc:
        raise WildmergeError(f"{path} is damaged ({exc}); rerun `wildmerge sample` to rewrite it") from None
    seen = set()
    for i, e in enumerate(entries):
        missing = [k for k in REQUIRED if k not in e]
        if missing:
            raise WildmergeError(f"{path}: entry {i} lacks {missing}")
        if e["kind"] not in KINDS:
            raise WildmergeError(f"{path}: entry {e['model_id']!r} has kind {e['kind']!r}; valid: {KINDS}")
        if e["model_id"] in seen:
            raise WildmergeError(f"{path}: model_id {e['model_id']!r} appears twice")
        seen.add(e["model_id"])
        e.setdefault("method", None)
        e.setdefault("n", 1 if e["kind"] == "expert" else (0 if e["kind"] == "base" else None))
        e.setdefault("subset_id", None)
        e.setdefault("hparams", {})
        e.setdefault("experts", [])
        e.setdefault("label", e["model_id"])
    bases = [e for e in entries if e["kind"] == "base"]
    if len(bases) != 1:
        raise WildmergeError(f"{path}: expected exactly one base entry, found {len(bases)}")
    return entries
