"""A family built once into a content-checked cache folder: what the embedded families (the synthetic demo family,
``demo/family.py``, and the SmolLM2 family, ``smollm2/family.py``) share.

A family lives in ``<cache>/<key>/`` (the key: ``v<builder version>-seed<seed>[...][-quick]``). It is used only if its
``family.json`` (written last by the builder) matches the builder version and every file's SHA-256 matches: a
partial, corrupted or stale folder is rebuilt, never used. Builds go through ``atomic_dir`` under a per-key claim, so
a killed build leaves nothing half-made and two processes never build the same family at once. A folder checksummed
once in this process is trusted again while no data file's path, size or mtime changes (its stat signature).

Shared as well: ``family.json``'s head and completion (``build_record``, ``finish``), the family's description and
pool (``CachedFamily.describe``, ``write_pool_file``), and the references every family resolves (``base``, ``tasks``,
``pool``, an expert, the probe's ``probe_tasks`` and ``joint``: ``CachedFamily.resolve``). Each family keeps only what
is its own: what to build, its spec, which files it needs, its own references.
"""

import hashlib
import json
import os
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from wildmerge.atomic import atomic_dir, write_json, write_text
from wildmerge.errors import ConfigError, WildmergeError, did_you_mean
from wildmerge.families import published
from wildmerge.locks import wait_claim

MANIFEST = "family.json"  # the builders' completion marker (demo/build.py, smollm2/build.py)
REF_NAMES = ("base", "tasks", "pool", "probe_tasks", "joint")  # what every family resolves, besides its experts


@dataclass(frozen=True)
class CachedFamily:
    """How one embedded family is named, where it is cached, and what its messages say."""

    label: str  # "demo": ``demo:<name>`` references, ``wildmerge demo: rebuilding ...``, ``~/.cache/wildmerge/demo``
    title: str  # "demo": ``cannot write the demo cache ...``
    env: str  # "WILDMERGE_DEMO": ``$WILDMERGE_DEMO_CACHE``, ``$WILDMERGE_DEMO_QUICK``
    tell_waits: bool = False  # print a line while another process builds the family
    build_cost: str = ""  # said once when a first use builds the family: "about 15 minutes on 2 CPU cores"
    unsigned_dirs: tuple = ()  # folders whose files (derived, rewritten on every use) the signature leaves out
    validated: set = field(default_factory=set, compare=False)  # stat signatures checksummed in this process
    derived: set = field(default_factory=set, compare=False)  # signatures whose derived files this process wrote

    def default_cache_dir(self) -> Path:
        env = os.environ.get(f"{self.env}_CACHE")
        return Path(env).expanduser() if env else Path.home() / ".cache" / "wildmerge" / self.label

    def quick_forced(self) -> bool:
        return os.environ.get(f"{self.env}_QUICK", "").strip().lower() in ("1", "true", "yes", "on")

    def cache(self, cache_dir=None) -> Path:
        return Path(cache_dir).expanduser().resolve() if cache_dir else self.default_cache_dir().resolve()

    def env_seed(self, name: str) -> int:
        """``$<env>_<name>`` (``SEED``, ``PROBE_SEED``) as a seed, default 0."""
        variable = f"{self.env}_{name}"
        text = os.environ.get(variable, "0")
        if not text.isdigit():
            raise ConfigError(f"{variable} must be a non-negative integer, got {text!r}")
        return int(text)

    def unknown(self, ref: str, name: str, valid: list, what: str, hint: str = "") -> ConfigError:
        """The error for a reference ``<prefix><name>`` that names none of ``valid``."""
        prefix = ref[: len(ref) - len(name)]
        return ConfigError(f"unknown {what} {ref!r}{did_you_mean(name, valid)}; valid: "
                           f"{', '.join(prefix + v for v in valid)}{hint}")

    def check_seed(self, seed) -> None:
        if not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"{self.label} seed must be a non-negative integer, got {seed!r}")

    def describe(self, root: Path, manifest: dict, description: str) -> dict:
        """The paths of the family at ``root`` and its pool of ``<label>:`` references, from its ``family.json``."""
        experts, prefix = manifest["experts"], f"{self.label}:"
        pool = {"name": self.label, "description": description, "base": {"model": prefix + "base"},
                "experts": [{"model": prefix + e["name"], "name": e["name"], "domain": e["domain"],
                             "description": e["description"]} for e in experts]}
        return {"root": str(root), "seed": manifest["seed"], "quick": manifest["quick"],
                "builder_version": manifest["builder_version"], "base": str(root / "base"),
                "experts": {e["name"]: str(root / e["path"]) for e in experts}, "tasks": str(root / "tasks"),
                "task_names": manifest["tasks"]["names"], "pool": pool, "pool_file": str(root / "pool.yml"),
                "manifest": str(root / MANIFEST)}

    def resolve(self, ref: str, experts: list, every_expert, ensure_family: Callable, ensure_probe: Callable,
                build: bool = True) -> Optional[str]:
        """The path behind ``<label>:<name>`` for the names every family has: ``REF_NAMES`` and the ``experts`` of
        this size (a name among ``every_expert``, the full family's, gets the hint to unset ``<env>_QUICK``).

        Builds the family on first use (seed ``$<env>_SEED``, default 0; the quick family when ``$<env>_QUICK``)
        and, for ``probe_tasks`` / ``joint``, its probe data (seed ``$<env>_PROBE_SEED``); ``build=False`` checks the
        name only and returns None."""
        name = ref.removeprefix(f"{self.label}:")
        valid = [*REF_NAMES, *experts]
        if name not in valid:
            hint = (f"; the quick {self.title} family has only {len(experts)} experts ({', '.join(experts)}): unset "
                    f"{self.env}_QUICK" if name in every_expert else "")
            raise self.unknown(ref, name, valid, f"{self.title} model", hint)
        if not build:  # the name alone checked (a pool's data, a dry run): nothing built
            return None
        info = ensure_family(seed=self.env_seed("SEED"), quick=self.quick_forced())
        if name in ("probe_tasks", "joint"):
            probe = ensure_probe(info, seed=self.env_seed("PROBE_SEED"))
            return probe["tasks" if name == "probe_tasks" else "joint"]
        if name == "pool":
            return info["pool_file"]
        return info[name] if name in ("base", "tasks") else info["experts"][name]

    def signature(self, root: Path) -> tuple:
        """Path, size and mtime of every data file: any change sends the family back to a full checksum check."""
        if not root.is_dir():
            return (str(root),)
        return (str(root),) + tuple(
            (str(p), st.st_size, st.st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix not in (".yaml", ".yml") and p.parent.name not in self.unsigned_dirs
            and (st := p.stat()))


def built_root(paths, task_names: list, key_of: Callable[[dict], str]) -> Optional[tuple]:
    """(folder, its ``family.json``) of the built family that holds one of ``paths`` (its base or an expert, at most
    two levels below it: what a family's own ``pool.yml`` names) and lists ``task_names``, where the folder's name is
    ``key_of(family.json)`` (the key this process would give that family); None when no path lies in one."""
    for path in paths:
        path = Path(str(path)).expanduser()
        if not path.is_absolute() or not path.exists():  # a reference (``smollm2:base``) or a model not made yet
            continue
        for root in list(path.resolve().parents)[:3]:
            if (root / MANIFEST).is_file():
                try:
                    manifest = json.loads((root / MANIFEST).read_text())
                    if manifest["tasks"]["names"] == list(task_names) and root.name == key_of(manifest):
                        return root, manifest
                except (ValueError, KeyError, TypeError):
                    pass
                break
    return None


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checksums(root) -> dict:
    """SHA-256 of every data file under ``root`` (task YAMLs, pool files and the demo experts' ``calibration/`` items
    are derived after the build, not data)."""
    root = Path(root)
    return {
        str(p.relative_to(root)): sha256(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != MANIFEST and p.suffix not in (".yaml", ".yml")
        and p.relative_to(root).parts[0] != "calibration"
    }


def build_record(builder_version: int, seed: int, quick: bool, threads: int) -> dict:
    """The head of a family's ``family.json``: what built it, with which seed, size and library versions."""
    from importlib.metadata import version

    from wildmerge import __version__

    libraries = {name: version(name) for name in ("torch", "transformers", "tokenizers", "safetensors", "numpy")}
    return {"builder_version": builder_version, "seed": seed, "quick": quick, "threads": threads,
            "versions": {"wildmerge": __version__, **libraries, "python": platform.python_version(),
                         "machine": platform.machine()}}


def finish(out: Path, manifest: dict) -> dict:
    """Write ``manifest`` with the SHA-256 of every data file under ``out`` as ``family.json``, last: the completion
    marker that ``problem`` checks."""
    manifest["files"] = checksums(out)
    write_json(Path(out) / MANIFEST, manifest)
    return manifest


def write_if_changed(path, text: str) -> Path:
    """Write ``text`` to ``path`` unless it already holds it: the derived files (task YAMLs, pool files, the demo
    experts' items), rewritten for where the family is now on every use."""
    path = Path(path)
    if not path.exists() or path.read_text() != text:
        write_text(path, text)
    return path


def write_yaml(path, data: dict) -> Path:
    import yaml

    return write_if_changed(path, yaml.safe_dump(data, sort_keys=False))


def write_pool_file(info: dict, experts: list, **defaults) -> Path:
    """The family's ``pool.yml`` with absolute paths: its base, ``defaults`` (pool-level keys) and ``experts``."""
    pool = {"name": info["pool"]["name"], "description": info["pool"]["description"], "base": {"model": info["base"]},
            **defaults, "experts": experts}
    return write_yaml(info["pool_file"], pool)


def problem(root, builder_version: int, needed: Callable[[dict], Iterable[str]], keys: tuple = ()) -> str | None:
    """Why the family at ``root`` cannot be used, or None when it is complete and intact: ``family.json`` readable
    (with ``files`` and ``keys``), written by ``builder_version``, listing every file of ``needed(manifest)``, and
    every listed file present with its SHA-256."""
    root = Path(root)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        return f"{manifest_path} is missing (a partial or interrupted build)"
    try:
        manifest = json.loads(manifest_path.read_text())
        files = {key: manifest[key] for key in ("files", *keys)}["files"]  # a KeyError names the first one missing
    except (ValueError, KeyError) as exc:
        return f"{manifest_path} is unreadable ({exc})"
    if manifest.get("builder_version") != builder_version:
        return f"built by builder version {manifest.get('builder_version')}, not {builder_version}"
    for rel in needed(manifest):
        if rel not in files:
            return f"{rel} is not listed in {MANIFEST}"
    for rel, digest in files.items():
        path = root / rel
        if not path.is_file():
            return f"{path} is missing"
        if sha256(path) != digest:
            return f"{path} does not match its checksum (corrupted or modified)"
    return None


def ensure(family: CachedFamily, cache_dir, seed: int, quick: bool, *,
           family_key: Callable[[int, bool], str], check: Callable[[Path], str | None],
           build: Callable[..., None], describe: Callable[[Path, dict], dict],
           write_derived: Callable[[Path, dict], None], rebuild: bool = False,
           cannot_build: Callable[[], str | None] | None = None) -> dict:
    """The family ``family_key(seed, quick)`` in ``cache_dir`` (None: the family's default cache), described.

    Under the claim on its folder: reused when it validates (by stat signature, else by ``check(root)``: why it is
    unusable, or None), otherwise built by ``build(tmp, seed=, quick=)`` into a temporary sibling that is moved into
    place (``cannot_build()``: why it cannot be built here, refused before anything is removed); then
    ``describe(root, family.json)`` gives the paths and ``write_derived(root, info)`` rewrites the derived files
    (once per process and family: their pool file, written last, is the sign they are there)."""
    family.check_seed(seed)
    cache = family.cache(cache_dir)
    key = family_key(seed, quick)
    root = cache / key
    try:
        cache.mkdir(parents=True, exist_ok=True)
        on_wait = (lambda who: print(f"wildmerge {family.label}: waiting for {who} to build {root}")) \
            if family.tell_waits else None
        claim = wait_claim(cache / f".{key}.lock", on_wait=on_wait)
    except OSError as exc:
        raise WildmergeError(f"cannot write the {family.title} cache {cache} ({exc}); set {family.env}_CACHE "
                             f"or pass --out to a writable folder") from exc
    with claim:
        reason = "rebuild asked" if rebuild else (None if family.signature(root) in family.validated else check(root))
        if reason is not None:
            why_not = cannot_build() if cannot_build else None
            if why_not:
                raise WildmergeError(why_not)
            if root.exists():
                print(f"wildmerge {family.label}: rebuilding {root}: {reason}", flush=True)
            elif family.build_cost:  # a first `smollm2:` reference: what is happening, its cost, where it stays
                print(f"wildmerge {family.label}: building the {family.title} family{' (quick)' if quick else ''} "
                      f"into {root} (first use: {family.build_cost}; cached there for later runs, "
                      f"{family.env}_CACHE moves it)", flush=True)
            clean_leftovers(cache, key)
            with atomic_dir(root) as tmp:
                build(tmp, seed=seed, quick=quick)
            said = published.compare(family.label, key, json.loads((root / MANIFEST).read_text()))
            if said:
                print(said, flush=True)
        signature = family.signature(root)
        family.validated.add(signature)
        info = describe(root, json.loads((root / MANIFEST).read_text()))
        # once per process: every reference of a pool resolves here (13 for the demo pool), and the derived files
        # (the experts' items above all) are the same each time; rewritten if the last one written is gone
        fresh = reason is not None or signature not in family.derived
        if fresh or not Path(info.get("pool_file") or root / "?").is_file():
            write_derived(root, info)
            family.derived.add(signature)
    return info


def clean_leftovers(cache: Path, key: str) -> None:
    """Remove this key's temporary folders from killed builds (other keys may be building right now)."""
    for p in cache.glob(f".{key}.*"):
        if ".tmp-" in p.name or ".old-" in p.name:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
