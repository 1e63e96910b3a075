"""The cached SmolLM2 family: build once, validate every time, resolve ``smollm2:<name>`` references.

Like the demo family (``wildmerge.demo.family``): it lives in ``<cache>/v<builder version>-seed<seed>[-quick]/``
and is used only if its ``family.json`` (written last) matches the builder version and every file's SHA-256 matches;
a partial, corrupted or stale folder is rebuilt, never used. Builds go through ``atomic_dir`` under a per-key claim,
so a killed build leaves nothing half-made and two processes never build the same family at once.
"""

import json
import os
import shutil
from pathlib import Path

from wildmerge.atomic import atomic_dir, write_text
from wildmerge.demo.smollm2 import spec as S
from wildmerge.errors import ConfigError, WildmergeError, did_you_mean

PREFIX = "smollm2:"
# Issue "Every feature from every pool": once pool experts accept `data: {text, labelled}`, set this to True; until
# then the pool gives each expert the labelled file under the key today's code reads, `calibration:`.
POOL_DATA_KEY = False
_VALIDATED: set = set()  # stat signatures of families already checksummed in this process


def default_cache_dir() -> Path:
    """``$WILDMERGE_SMOLLM2_CACHE`` or ``~/.cache/wildmerge/smollm2``."""
    env = os.environ.get("WILDMERGE_SMOLLM2_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "wildmerge" / "smollm2"


def quick_forced() -> bool:
    return os.environ.get("WILDMERGE_SMOLLM2_QUICK", "").strip().lower() in ("1", "true", "yes", "on")


def family_key(seed: int, quick: bool) -> str:
    return f"v{S.BUILDER_VERSION}-seed{seed}" + ("-quick" if quick else "")


def problem(root) -> str | None:
    """Why the family at ``root`` cannot be used, or None when it is complete and intact."""
    from wildmerge.demo.build import sha256
    from wildmerge.demo.smollm2.build import MANIFEST

    manifest_path = Path(root) / MANIFEST
    if not manifest_path.is_file():
        return f"{manifest_path} is missing (a partial or interrupted build)"
    try:
        manifest = json.loads(manifest_path.read_text())
        files, experts = manifest["files"], manifest["experts"]
    except (ValueError, KeyError) as exc:
        return f"{manifest_path} is unreadable ({exc})"
    if manifest.get("builder_version") != S.BUILDER_VERSION:
        return f"built by builder version {manifest.get('builder_version')}, not {S.BUILDER_VERSION}"
    needed = ["base/model.safetensors", "base/config.json", "base/tokenizer.json"]
    needed += [f"{e['path']}/{'adapter_model' if e['shape'] == 'lora' else 'model'}.safetensors" for e in experts]
    needed += [rel for e in experts for rel in (e.get("data") or {}).values()]
    for rel in needed:
        if rel not in files:
            return f"{rel} is not listed in {MANIFEST}"
    for rel, digest in files.items():
        path = Path(root) / rel
        if not path.is_file():
            return f"{path} is missing"
        if sha256(path) != digest:
            return f"{path} does not match its checksum (corrupted or modified)"
    return None


def _describe(root: Path, manifest: dict) -> dict:
    experts = manifest["experts"]
    pool = {
        "name": "smollm2",
        "description": f"SmolLM2-135M-Instruct and {len(experts)} experts fine-tuned on generated skills "
                       f"({'quick, ' if manifest['quick'] else ''}seed {manifest['seed']})",
        "base": {"model": PREFIX + "base"},
        "experts": [{"model": PREFIX + e["name"], "name": e["name"], "domain": e["domain"],
                     "description": e["description"]} for e in experts],
    }
    return {
        "root": str(root), "seed": manifest["seed"], "quick": manifest["quick"],
        "builder_version": manifest["builder_version"], "base": str(root / "base"),
        "experts": {e["name"]: str(root / e["path"]) for e in experts},
        "shapes": {e["name"]: e["shape"] for e in experts},
        "data": {e["name"]: {k: str(root / v) for k, v in e["data"].items()} for e in experts if e.get("data")},
        "tasks": str(root / "tasks"), "task_names": manifest["tasks"]["names"], "pool": pool,
        "pool_file": str(root / "pool.yml"), "manifest": str(root / "family.json"),
    }


def pool_entry(expert: dict, model: str, data: dict | None) -> dict:
    """One expert of a pool file: its model, name, domain and data (none: the pool's ``generate`` applies)."""
    entry = {"model": model, "name": expert["name"], "domain": expert["domain"]}
    if data and POOL_DATA_KEY:
        entry["data"] = {"text": data["text"], "labelled": data["labelled"]}
    elif data:
        entry["calibration"] = data["labelled"]  # prompt, answer and text fields: read by RegMean, CoM, mergeability
    return entry


def _write_derived(root: Path, info: dict) -> None:
    """Task YAMLs and a pool file with absolute paths for where the family is now (cheap, idempotent)."""
    import yaml

    from wildmerge.demo.smollm2.tasks import write_task_yamls

    write_task_yamls(root / "tasks")
    pool = {"name": info["pool"]["name"], "description": info["pool"]["description"], "base": {"model": info["base"]}}
    if any(name not in info["data"] for name in info["experts"]):
        pool["data" if POOL_DATA_KEY else "calibration"] = "generate"  # for the experts published without data
    pool["experts"] = [pool_entry(e, info["experts"][e["name"]], info["data"].get(e["name"]))
                       for e in info["pool"]["experts"]]
    text = yaml.safe_dump(pool, sort_keys=False)
    path = root / "pool.yml"
    if not path.exists() or path.read_text() != text:
        write_text(path, text)


def _build(out, seed: int, quick: bool, threads: int, progress: bool) -> None:
    from wildmerge.demo.smollm2.build import build_family

    build_family(out, seed=seed, quick=quick, threads=threads, progress=progress)


def ensure_family(cache_dir=None, seed: int = 0, quick: bool = False, threads: int = 1,
                  progress: bool = True, rebuild: bool = False) -> dict:
    """The SmolLM2 family for ``seed``: reused when the cache is intact, built (or rebuilt) otherwise.

    ``WILDMERGE_SMOLLM2_QUICK=1`` forces the quick family (2 experts, a few steps, a few items). Returns paths:
    ``root``, ``base``, ``experts`` ({name: folder}), ``shapes``, ``data`` ({name: {text, labelled}} for the
    experts published with data), ``tasks`` (lm-eval include path), ``task_names``, ``pool`` (entries with
    ``smollm2:`` references), ``pool_file`` (a pool YAML with absolute paths) and ``manifest`` (``family.json``).
    """
    from wildmerge.demo.smollm2.source import missing
    from wildmerge.locks import wait_claim

    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"smollm2 seed must be a non-negative integer, got {seed!r}")
    quick = bool(quick) or quick_forced()
    cache = Path(cache_dir).expanduser().resolve() if cache_dir else default_cache_dir().resolve()
    key = family_key(seed, quick)
    root = cache / key
    try:
        cache.mkdir(parents=True, exist_ok=True)
        claim = wait_claim(cache / f".{key}.lock",
                           on_wait=lambda who: print(f"wildmerge smollm2: waiting for {who} to build {root}"))
    except OSError as exc:
        raise WildmergeError(f"cannot write the SmolLM2 cache {cache} ({exc}); set WILDMERGE_SMOLLM2_CACHE "
                             f"or pass --out to a writable folder") from exc
    with claim:
        reason = "rebuild asked" if rebuild else (None if _signature(root) in _VALIDATED else problem(root))
        if reason is not None:
            if missing():
                raise WildmergeError(missing())
            if root.exists():
                print(f"wildmerge smollm2: rebuilding {root}: {reason}", flush=True)
            _clean_leftovers(cache, key)
            with atomic_dir(root) as tmp:
                _build(tmp, seed=seed, quick=quick, threads=threads, progress=progress)
        _VALIDATED.add(_signature(root))
        info = _describe(root, json.loads((root / "family.json").read_text()))
        _write_derived(root, info)
    return info


def _signature(root: Path) -> tuple:
    """Path, size and mtime of every data file: any change sends the family back to a full checksum check."""
    if not root.is_dir():
        return (str(root),)
    return (str(root),) + tuple((str(p), st.st_size, st.st_mtime_ns) for p in sorted(root.rglob("*"))
                                if p.is_file() and p.suffix not in (".yaml", ".yml") and (st := p.stat()))


def _clean_leftovers(cache: Path, key: str) -> None:
    """Remove this key's temporary folders from killed builds (other keys may be building right now)."""
    for p in cache.glob(f".{key}.*"):
        if ".tmp-" in p.name or ".old-" in p.name:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def _seed(variable: str) -> int:
    text = os.environ.get(variable, "0")
    if not text.isdigit():
        raise ConfigError(f"{variable} must be a non-negative integer, got {text!r}")
    return int(text)


def resolve_smollm2_ref(ref: str) -> str:
    """Absolute path for ``smollm2:base``, ``smollm2:<expert>``, ``smollm2:tasks``, ``smollm2:pool``, an expert's
    data ``smollm2:text/<expert>`` / ``smollm2:labelled/<expert>``, or the probe's ``smollm2:probe_tasks`` and
    ``smollm2:joint`` (the joint multi-skill reference model).

    Builds the family on first use (seed from ``$WILDMERGE_SMOLLM2_SEED``, default 0; the quick family when
    ``$WILDMERGE_SMOLLM2_QUICK=1``; the probe's splits and joint model from ``$WILDMERGE_SMOLLM2_PROBE_SEED``).
    """
    if not isinstance(ref, str) or not ref.startswith(PREFIX):
        raise ConfigError(f"{ref!r} is not a SmolLM2 family reference; write smollm2:base or smollm2:arithmetic")
    name, quick = ref[len(PREFIX):], quick_forced()
    experts = [e.name for e in S.experts_for(quick)]
    kind, _, expert = name.partition("/")
    if expert and kind in ("text", "labelled"):
        with_data = [e.name for e in S.experts_for(quick) if e.has_data]
        if expert not in with_data:
            why = " (published without data: its pool entry uses generate)" if expert in experts else ""
            raise ConfigError(f"no SmolLM2 data {ref!r}{why}{did_you_mean(expert, with_data)}; valid: "
                              f"{', '.join(f'{PREFIX}{kind}/{n}' for n in with_data)}")
        return ensure_family(seed=_seed("WILDMERGE_SMOLLM2_SEED"), quick=quick)["data"][expert][kind]
    valid = ["base", "tasks", "pool", "probe_tasks", "joint"] + experts
    if name not in valid:
        hint = ""
        if quick and name in {e.name for e in S.EXPERTS}:
            hint = f"; the quick SmolLM2 family has only {', '.join(experts)}: unset WILDMERGE_SMOLLM2_QUICK"
        raise ConfigError(f"unknown SmolLM2 model {ref!r}{did_you_mean(name, valid)}; valid: "
                          f"{', '.join(PREFIX + v for v in valid)}{hint}")
    info = ensure_family(seed=_seed("WILDMERGE_SMOLLM2_SEED"), quick=quick)
    if name in ("probe_tasks", "joint"):
        from wildmerge.demo.smollm2.probe import ensure_probe_data

        probe = ensure_probe_data(info, seed=_seed("WILDMERGE_SMOLLM2_PROBE_SEED"))
        return probe["tasks" if name == "probe_tasks" else "joint"]
    if name == "pool":
        return info["pool_file"]
    return info[name] if name in ("base", "tasks") else info["experts"][name]
