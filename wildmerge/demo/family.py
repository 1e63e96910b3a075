"""The cached demo family: build once, validate every time, resolve ``demo:<name>`` references.

A family lives in ``<cache>/v<builder version>-seed<seed>[-<kernels>][-quick]/`` and is used only if its
``family.json`` and every file's SHA-256 check out; a partial, corrupted or stale folder is rebuilt, never used
(``demo/cache.py``: the claim, the checks and the atomic rebuild, shared with the SmolLM2 family).
"""

import functools
import os
from pathlib import Path

from wildmerge.atomic import write_text
from wildmerge.demo import cache as C
from wildmerge.demo import spec as S
from wildmerge.errors import ConfigError, WildmergeError, did_you_mean

# the calibration/ files are derived (rewritten on every use), not data
FAMILY = C.CachedFamily(label="demo", title="demo", env="WILDMERGE_DEMO", unsigned_dirs=("calibration",))


def default_cache_dir() -> Path:
    """``$WILDMERGE_DEMO_CACHE`` or ``~/.cache/wildmerge/demo``."""
    return FAMILY.default_cache_dir()


def quick_forced() -> bool:
    return FAMILY.quick_forced()


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
    import sys

    from wildmerge import lifeline

    env = {**os.environ, "ATEN_CPU_CAPABILITY": pinned,
           "MKL_CBWR": "AVX2" if pinned == "avx2" else "COMPATIBLE"}  # MKL's reproducible mode, to be safe
    cmd = [sys.executable, "-m", "wildmerge.demo.build", str(out), str(seed), "quick" if quick else "full",
           str(threads), "progress" if progress else "quiet"]
    if lifeline.run(cmd, env=env) != 0:  # the child dies with this process
        raise WildmergeError(f"building the demo family with WILDMERGE_DEMO_KERNELS={pinned} failed (see above)")


def problem(root) -> str | None:
    """Why the family at ``root`` cannot be used, or None when it is complete and intact."""
    return C.problem(root, S.BUILDER_VERSION, _needed)


def _needed(manifest: dict) -> list:
    return (["base/model.safetensors", "base/config.json", "base/tokenizer.json"]
            + [f"{e['path']}/model.safetensors" for e in manifest.get("experts", [])])


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
    quick = bool(quick) or quick_forced()
    build = functools.partial(_build, threads=threads, progress=progress)
    return C.ensure(FAMILY, cache_dir, seed, quick, family_key=family_key, check=problem, build=build,
                    describe=_describe, write_derived=_write_derived, rebuild=rebuild)


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
        only_full = quick and name in {e.name for e in S.EXPERTS}
        raise FAMILY.unknown(ref, name, valid, "demo model", f"; the quick demo family has only {S.QUICK.n_experts} "
                             "experts: unset WILDMERGE_DEMO_QUICK" if only_full else "")
    info = ensure_family(seed=FAMILY.env_seed("SEED"), quick=quick)
    if name in ("probe_tasks", "joint"):
        from wildmerge.demo.probe_data import ensure_probe_data

        probe = ensure_probe_data(info, seed=FAMILY.env_seed("PROBE_SEED"))
        return probe["tasks" if name == "probe_tasks" else "joint"]
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
