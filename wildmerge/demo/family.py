"""The cached demo family: build once, validate every time, resolve ``demo:<name>`` references.

A family lives in ``<cache>/v<builder version>-seed<seed>[-quick]/``. It is used only if its ``family.json``
(written last by the builder) matches the key and every file's SHA-256 matches: a partial, corrupted or stale
folder is rebuilt, never used. Builds go through ``atomic_dir`` under a per-key file lock, so a killed build
leaves nothing half-made and two processes never build the same family at once.
"""

import json
import os
import shutil
from pathlib import Path

from wildmerge.atomic import atomic_dir, write_text
from wildmerge.demo import spec as S
from wildmerge.errors import ConfigError, WildmergeError, did_you_mean
from wildmerge.locks import wait_claim

_VALIDATED: set = set()  # stat signatures of families already checksummed in this process


def default_cache_dir() -> Path:
    """``$WILDMERGE_DEMO_CACHE`` or ``~/.cache/wildmerge/demo``."""
    env = os.environ.get("WILDMERGE_DEMO_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "wildmerge" / "demo"


def quick_forced() -> bool:
    return os.environ.get("WILDMERGE_DEMO_QUICK", "").strip().lower() in ("1", "true", "yes", "on")


KERNEL_LEVELS = ("avx2", "default")
README_KERNELS = "AVX512"  # the ATen kernel level of the build the README's demo numbers come from


def pinned_kernels() -> str | None:
    """``$WILDMERGE_DEMO_KERNELS``: the ATen kernel level to train with (``avx2`` or ``default``), or None (unset or
    ``native``: this machine's best kernels, as the README's family was built).

    Training is bit-reproducible on one machine, but ATen picks vectorised kernels for the CPU (AVX-512, AVX2,
    scalar), and their float rounding differs (measured: every weight of the quick family); a pinned level gives the
    same family on every x86-64 CPU that has it, at the price of a family other than the native build's."""
    level = os.environ.get("WILDMERGE_DEMO_KERNELS", "").strip().lower()
    if level in ("", "native"):
        return None
    if level not in KERNEL_LEVELS:
        raise ConfigError(f"WILDMERGE_DEMO_KERNELS={level!r}{did_you_mean(level, KERNEL_LEVELS)}; use one of "
                          f"{', '.join(KERNEL_LEVELS)}, or native (unset) for this machine's kernels")
    return level


def family_key(seed: int, quick: bool) -> str:
    pinned = pinned_kernels()
    return f"v{S.BUILDER_VERSION}-seed{seed}" + (f"-{pinned}" if pinned else "") + ("-quick" if quick else "")


def _build(out, seed: int, quick: bool, threads: int, progress: bool) -> None:
    """Train the family into ``out``: here, or with pinned kernels in a child process (ATen reads its kernel level
    once per process, at start-up)."""
    from wildmerge.demo.build import build_family

    pinned = pinned_kernels()
    if pinned is None:
        import torch

        level = torch.backends.cpu.get_cpu_capability()
        if level != README_KERNELS:
            print(f"wildmerge demo: torch runs {level} kernels on this CPU; the README's demo numbers come from a "
                  f"build with {README_KERNELS} kernels, whose rounding differs, so this family's weights and scores "
                  "will differ from them (README: 'The demo family across machines')", flush=True)
        build_family(out, seed=seed, quick=quick, threads=threads, progress=progress)
        return
    import subprocess
    import sys

    env = {**os.environ, "ATEN_CPU_CAPABILITY": pinned,
           "MKL_CBWR": "AVX2" if pinned == "avx2" else "COMPATIBLE"}  # MKL's reproducible mode, to be safe
    cmd = [sys.executable, "-m", "wildmerge.demo.build", str(out), str(seed), "quick" if quick else "full",
           str(threads), "progress" if progress else "quiet"]
    if subprocess.run(cmd, env=env).returncode != 0:
        raise WildmergeError(f"building the demo family with WILDMERGE_DEMO_KERNELS={pinned} failed (see above)")


def problem(root) -> str | None:
    """Why the family at ``root`` cannot be used, or None when it is complete and intact."""
    from wildmerge.demo.build import MANIFEST, sha256

    root = Path(root)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        return f"{manifest_path} is missing (a partial or interrupted build)"
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError) as exc:
        return f"{manifest_path} is unreadable ({exc})"
    if manifest.get("builder_version") != S.BUILDER_VERSION:
        return f"built by builder version {manifest.get('builder_version')}, not {S.BUILDER_VERSION}"
    needed = ["base/model.safetensors", "base/config.json", "base/tokenizer.json"]
    needed += [f"{e['path']}/model.safetensors" for e in manifest.get("experts", [])]
    for rel in needed:
        if rel not in files:
            return f"{rel} is not listed in {MANIFEST}"
    for rel, digest in files.items():
        path = root / rel
        if not path.is_file():
            return f"{path} is missing"
        if sha256(path) != digest:
            return f"{path} does not match its checksum (corrupted or modified)"
    return None


def _describe(root: Path, manifest: dict) -> dict:
    experts = {e["name"]: str(root / e["path"]) for e in manifest["experts"]}
    pool = {
        "name": "demo",
        "description": f"wildmerge synthetic demo family ({'quick, ' if manifest['quick'] else ''}seed "
                       f"{manifest['seed']}): a Qwen3 base and {len(experts)} experts fine-tuned on synthetic skills",
        "base": {"model": "demo:base"},
        "experts": [{"model": f"demo:{e['name']}", "name": e["name"], "domain": e["domain"],
                     "description": e["description"]} for e in manifest["experts"]],
    }
    return {
        "root": str(root), "seed": manifest["seed"], "quick": manifest["quick"],
        "builder_version": manifest["builder_version"],
        "base": str(root / "base"), "experts": experts, "tasks": str(root / "tasks"),
        "task_names": manifest["tasks"]["names"], "pool": pool, "pool_file": str(root / "pool.yml"),
        "manifest": str(root / "family.json"),
    }


def _write_derived(root: Path, info: dict) -> None:
    """Task YAMLs and a pool file with absolute paths for where the family is now (cheap, idempotent)."""
    import yaml

    from wildmerge.demo.calibration import write_calibration
    from wildmerge.demo.tasks import write_task_yamls

    write_task_yamls(root / "tasks")
    calibration = write_calibration(root, info["seed"], info["quick"])
    pool = {
        "name": info["pool"]["name"], "description": info["pool"]["description"],
        "base": {"model": info["base"]},
        "experts": [{"model": info["experts"][e["name"]], "name": e["name"], "domain": e["domain"],
                     "calibration": calibration[e["name"]]}
                    for e in info["pool"]["experts"]],
    }
    text = yaml.safe_dump(pool, sort_keys=False)
    path = root / "pool.yml"
    if not path.exists() or path.read_text() != text:
        write_text(path, text)


def ensure_family(cache_dir=None, seed: int = 0, quick: bool = False, threads: int = 1,
                  progress: bool = True, rebuild: bool = False) -> dict:
    """The demo family for ``seed``: reused when the cache is intact, built (or rebuilt) otherwise.

    ``WILDMERGE_DEMO_QUICK=1`` forces the quick family (3 experts, tiny, seconds). Returns paths: ``root``,
    ``base``, ``experts`` ({name: path}), ``tasks`` (lm-eval include path), ``task_names``, ``pool`` (pool entries
    with ``demo:`` references, domains and descriptions), ``pool_file`` (a pool YAML with absolute paths), and
    ``manifest`` (``family.json``: how it was built, losses, versions, checksums).
    """
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"demo seed must be a non-negative integer, got {seed!r}")
    quick = bool(quick) or quick_forced()
    cache = Path(cache_dir).expanduser().resolve() if cache_dir else default_cache_dir().resolve()
    key = family_key(seed, quick)
    root = cache / key
    try:
        claim = wait_claim(cache / f".{key}.lock")
    except OSError as exc:
        raise WildmergeError(f"cannot write the demo cache {cache} ({exc}); set WILDMERGE_DEMO_CACHE "
                             f"or pass --out to a writable folder") from exc
    with claim:
        reason = "rebuild asked" if rebuild else (None if _signature(root) in _VALIDATED else problem(root))
        if reason is not None:
            if root.exists():
                print(f"wildmerge demo: rebuilding {root}: {reason}", flush=True)
            _clean_leftovers(cache, key)
            with atomic_dir(root) as tmp:
                _build(tmp, seed=seed, quick=quick, threads=threads, progress=progress)
        _VALIDATED.add(_signature(root))
        info = _describe(root, json.loads((root / "family.json").read_text()))
        _write_derived(root, info)
    return info


def _signature(root: Path) -> tuple:
    """Path, size and mtime of every file: any change sends the family back to a full checksum check."""
    if not root.is_dir():
        return (str(root),)
    return (str(root),) + tuple(
        (str(p), st.st_size, st.st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix not in (".yaml", ".yml") and p.parent.name != "calibration" and (st := p.stat())
    )


def _clean_leftovers(cache: Path, key: str) -> None:
    """Remove this key's temporary folders from killed builds (other keys may be building right now)."""
    for p in cache.glob(f".{key}.*"):
        if ".tmp-" in p.name or ".old-" in p.name:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def resolve_demo_ref(ref: str) -> str:
    """Absolute path for ``demo:base``, ``demo:expert_01`` ... ``demo:expert_12``, ``demo:tasks``, ``demo:pool``,
    or the probe's additions ``demo:probe_tasks`` and ``demo:joint`` (the joint multi-skill reference model).

    Builds the family on first use (seed from ``$WILDMERGE_DEMO_SEED``, default 0; the quick family when
    ``$WILDMERGE_DEMO_QUICK=1``; the probe's splits and joint model from ``$WILDMERGE_DEMO_PROBE_SEED``, default 0).
    """
    if not isinstance(ref, str) or not ref.startswith("demo:"):
        raise ConfigError(f"{ref!r} is not a demo reference; write demo:base, demo:expert_01 or demo:tasks")
    name = ref[len("demo:"):]
    quick = quick_forced()
    if name.startswith(("unlabelled/", "calibration/")):  # an expert's own data (demo/unlabelled.py, calibration.py)
        return _unlabelled_path(ref, name.split("/", 1)[1], quick)
    valid = ["base", "tasks", "pool", "probe_tasks", "joint"] + [e.name for e in S.experts_for(quick)]
    if name not in valid:
        hint = ""
        if quick and name in {e.name for e in S.EXPERTS}:
            hint = f"; the quick demo family has only {S.QUICK.n_experts} experts: unset WILDMERGE_DEMO_QUICK"
        raise ConfigError(f"unknown demo model {ref!r}{did_you_mean(name, valid)}; valid: "
                          f"{', '.join('demo:' + v for v in valid)}{hint}")
    seed_text = os.environ.get("WILDMERGE_DEMO_SEED", "0")
    if not seed_text.isdigit():
        raise ConfigError(f"WILDMERGE_DEMO_SEED must be a non-negative integer, got {seed_text!r}")
    info = ensure_family(seed=int(seed_text), quick=quick)
    if name in ("probe_tasks", "joint"):
        from wildmerge.demo.probe_data import ensure_probe_data

        probe_seed = os.environ.get("WILDMERGE_DEMO_PROBE_SEED", "0")
        if not probe_seed.isdigit():
            raise ConfigError(f"WILDMERGE_DEMO_PROBE_SEED must be a non-negative integer, got {probe_seed!r}")
        return ensure_probe_data(info, seed=int(probe_seed))["tasks" if name == "probe_tasks" else "joint"]
    if name in ("base", "tasks"):
        return info[name]
    if name == "pool":
        return info["pool_file"]
    return info["experts"][name]


def _unlabelled_path(ref: str, expert: str, quick: bool) -> str:
    from wildmerge.demo.calibration import calibration_file
    from wildmerge.demo.unlabelled import unlabelled_file

    valid = [e.name for e in S.experts_for(quick)]
    if expert not in valid:
        raise ConfigError(f"unknown demo data {ref!r}{did_you_mean(expert, valid)}; valid: "
                          f"{', '.join(ref.split('/')[0] + '/' + v for v in valid)}")
    seed_text = os.environ.get("WILDMERGE_DEMO_SEED", "0")
    info = ensure_family(seed=int(seed_text) if seed_text.isdigit() else 0, quick=quick)
    return str((calibration_file if ref.startswith("demo:calibration/") else unlabelled_file)(info, expert))
