"""A family built once into a content-checked cache folder: what the embedded families (the synthetic demo family,
``demo/family.py``, and the SmolLM2 family, ``demo/smollm2/family.py``) share.

A family lives in ``<cache>/<key>/`` (the key: ``v<builder version>-seed<seed>[...][-quick]``). It is used only if its
``family.json`` (written last by the builder) matches the builder version and every file's SHA-256 matches: a
partial, corrupted or stale folder is rebuilt, never used. Builds go through ``atomic_dir`` under a per-key claim, so
a killed build leaves nothing half-made and two processes never build the same family at once. A folder checksummed
once in this process is trusted again while no data file's path, size or mtime changes (its stat signature).

Each family keeps only what is its own: what to build, its spec, which files it needs, how it describes itself.
"""

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from wildmerge.atomic import atomic_dir
from wildmerge.errors import ConfigError, WildmergeError, did_you_mean
from wildmerge.locks import wait_claim

MANIFEST = "family.json"  # the builders' completion marker (demo/build.py, demo/smollm2/build.py)


@dataclass(frozen=True)
class CachedFamily:
    """How one embedded family is named, where it is cached, and what its messages say."""

    label: str  # "demo": ``wildmerge demo: rebuilding ...``, ``demo seed must ...``, ``~/.cache/wildmerge/demo``
    title: str  # "demo": ``cannot write the demo cache ...``
    env: str  # "WILDMERGE_DEMO": ``$WILDMERGE_DEMO_CACHE``, ``$WILDMERGE_DEMO_QUICK``
    tell_waits: bool = False  # print a line while another process builds the family
    unsigned_dirs: tuple = ()  # folders whose files (derived, rewritten on every use) the signature leaves out
    validated: set = field(default_factory=set, compare=False)  # stat signatures checksummed in this process

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

    def signature(self, root: Path) -> tuple:
        """Path, size and mtime of every data file: any change sends the family back to a full checksum check."""
        if not root.is_dir():
            return (str(root),)
        return (str(root),) + tuple(
            (str(p), st.st_size, st.st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix not in (".yaml", ".yml") and p.parent.name not in self.unsigned_dirs
            and (st := p.stat()))


def problem(root, builder_version: int, needed: Callable[[dict], Iterable[str]], keys: tuple = ()) -> str | None:
    """Why the family at ``root`` cannot be used, or None when it is complete and intact: ``family.json`` readable
    (with ``files`` and ``keys``), written by ``builder_version``, listing every file of ``needed(manifest)``, and
    every listed file present with its SHA-256."""
    from wildmerge.demo.build import sha256

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
    ``describe(root, family.json)`` gives the paths and ``write_derived(root, info)`` rewrites the derived files."""
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
            clean_leftovers(cache, key)
            with atomic_dir(root) as tmp:
                build(tmp, seed=seed, quick=quick)
        family.validated.add(family.signature(root))
        info = describe(root, json.loads((root / MANIFEST).read_text()))
        write_derived(root, info)
    return info


def clean_leftovers(cache: Path, key: str) -> None:
    """Remove this key's temporary folders from killed builds (other keys may be building right now)."""
    for p in cache.glob(f".{key}.*"):
        if ".tmp-" in p.name or ".old-" in p.name:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
