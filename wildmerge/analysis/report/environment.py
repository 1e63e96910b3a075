"""What a report's numbers were made with, so they can be checked on another host: the installed versions against the
lock (``wildmerge.versions``), Python and the machine, and for the run's models from an embedded family (``demo:``,
``smollm2:``) that family's build: its cache folder key, one digest over its files' SHA-256 and its kernels.

Written as ``environment.json`` beside the tables and said in one line of ``leaderboard.md`` and the page.
"""

import hashlib
import json
from pathlib import Path
from typing import List, Optional

from wildmerge import versions
from wildmerge.analysis.report.run_data import RunData
from wildmerge.families.cache import MANIFEST
from wildmerge.hub import FAMILY_PREFIXES
from wildmerge.run import ENVIRONMENT



def family_root(model_path) -> Optional[Path]:
    """The family folder a model lies in (the nearest folder holding ``family.json``), or None."""
    for folder in (Path(model_path), *Path(model_path).parents):
        if (folder / MANIFEST).is_file():
            return folder
    return None


def files_digest(files: dict) -> str:
    """One SHA-256 over a family's ``files`` map (path -> SHA-256), as sorted compact JSON: two builds with the same
    digest hold the same bytes."""
    return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def family_record(root: Path, models: List[str], label: Optional[str] = None) -> dict:
    """A family's build as its ``family.json`` says it: key, seed, size, builder, digest, kernels, versions (a
    damaged one is recorded as such: the report's numbers stay readable, the record says it cannot vouch for them)."""
    head = {"family": label, "key": root.name, "path": str(root), "models": models}
    try:
        built = json.loads((root / MANIFEST).read_text())
        files = built["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {**head, "files_sha256": None, "kernels": None, "error": f"{MANIFEST} unreadable ({exc!r})"}
    return {**head, "builder_version": built.get("builder_version"), "seed": built.get("seed"),
            "quick": built.get("quick"), "files": len(files), "files_sha256": files_digest(files),
            "kernels": built.get("kernels"), "built_with": built.get("versions")}


def _pool_models(data: RunData) -> List[tuple]:
    """(pool name, reference, folder) of the base and every expert: from the manifest (the pool as resolved), else
    from the plan (no references there)."""
    if data.manifest is not None:
        models = data.manifest.models
        return [(m.name or "base", m.model, m.path) for m in (models.base, *models.experts)]
    return [(e.model_id, "", e.path) for e in data.plan.entries if e.kind in ("base", "expert")]


def families(data: RunData) -> List[dict]:
    """The embedded families the run's pool comes from, each with the pool models that lie in it and its label
    (``demo``, ``smollm2``) where a ``<label>:`` reference names it."""
    found, labels = {}, {}
    for name, ref, path in _pool_models(data):
        root = family_root(path) if path else None
        if root is not None:
            found.setdefault(root, []).append(name)
            label = next((p.rstrip(":") for p in FAMILY_PREFIXES if ref.startswith(p)), None)
            labels[root] = labels.get(root) or label
    return [family_record(root, names, labels[root]) for root, names in found.items()]


def environment(data: RunData, lock_text: Optional[str] = None) -> dict:
    """The record written as ``environment.json`` (``lock_text`` stands in for the lock file, for a check)."""
    from wildmerge import __version__

    return {"wildmerge": __version__, **versions.record(lock_text), "families": families(data)}


def combined_environment(runs: List[RunData], lock_text: Optional[str] = None) -> dict:
    """The record of a report over several runs: the versions once, each run's families, and every family once
    (``families``, so :func:`summary` says them as for one run)."""
    from wildmerge import __version__

    per_run = [{"run": data.run.name, "path": str(data.root), "families": families(data)} for data in runs]
    seen, union = set(), []
    for family in (f for r in per_run for f in r["families"]):
        if (family["key"], family["files_sha256"]) not in seen:
            seen.add((family["key"], family["files_sha256"]))
            union.append(family)
    return {"wildmerge": __version__, **versions.record(lock_text), "families": union, "runs": per_run}


def summary(env: dict) -> str:
    """The record in one line for ``leaderboard.md`` and the page."""
    fams = "".join(f"; {f['family'] or 'model'} family `{f['key']}` (files sha256 {(f['files_sha256'] or '?')[:12]}, "
                   f"kernels {(f['kernels'] or {}).get('aten', 'not recorded')})" for f in env["families"])
    return f"Made with wildmerge {env['wildmerge']}, {versions.describe(env)}{fams}; details in `{ENVIRONMENT}`."


def lock_note(env: dict) -> Optional[str]:
    """A note for the report when installed versions differ from the lock: its numbers may not be the published ones."""
    if not env["differ"]:
        return None
    return (f"installed versions differ from the lock ({versions.LOCK_NAME}): {versions.listed(env['differ'])}; "
            f"`make setup` installs the locked ones")
