"""The cached demo family: build once, validate every time, resolve ``demo:<name>`` references.

A family lives in ``<cache>/v<builder version>-seed<seed>[-<kernels>][-quick]/`` and is used only if its
``family.json`` and every file's SHA-256 check out; a partial, corrupted or stale folder is rebuilt, never used
(``families/cache.py``: the claim, the checks and the atomic rebuild, shared with the SmolLM2 family).
"""

import functools
import os
from pathlib import Path

from wildmerge.families.demo import spec as S
from wildmerge.errors import ConfigError, WildmergeError, did_you_mean
from wildmerge.families import cache as C

# the calibration/ and tasks_large/ files are derived (rewritten on use), not data
FAMILY = C.CachedFamily(label="demo", title="demo", env="WILDMERGE_DEMO", unsigned_dirs=("calibration", "tasks_large"))


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
    from wildmerge.families.demo.build import build_family

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
    cmd = [sys.executable, "-m", "wildmerge.families.demo.build", str(out), str(seed), "quick" if quick else "full",
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
    size = f"{'quick, ' if manifest['quick'] else ''}seed {manifest['seed']}"
    return FAMILY.describe(root, manifest, f"wildmerge synthetic demo family ({size}): a Qwen3 base and "
                                           f"{len(manifest['experts'])} experts fine-tuned on synthetic skills")


def _write_derived(root: Path, info: dict) -> None:
    """Task YAMLs, the experts' items and a pool file with absolute paths for where the family is now (cheap,
    idempotent)."""
    from wildmerge.families.demo.calibration import write_calibration
    from wildmerge.families.demo.tasks import write_task_yamls

    write_task_yamls(root / "tasks")
    calibration = write_calibration(root, info["seed"], info["quick"])
    C.write_pool_file(info, [{"model": info["experts"][e["name"]], "name": e["name"], "domain": e["domain"],
                              "calibration": calibration[e["name"]]} for e in info["pool"]["experts"]])


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


def resolve_demo_ref(ref: str, build: bool = True) -> str | None:
    """Absolute path for ``demo:base``, ``demo:expert_01`` ... ``demo:expert_12``, ``demo:tasks``, ``demo:pool``,
    an expert's data ``demo:unlabelled/<expert>`` / ``demo:calibration/<expert>``, the large suite's tasks
    ``demo:large_tasks`` (``large.py``), or the probe's additions
    ``demo:probe_tasks`` and ``demo:joint`` (the joint multi-skill reference model).

    Builds the family on first use (seed from ``$WILDMERGE_DEMO_SEED``, default 0; the quick family when
    ``$WILDMERGE_DEMO_QUICK=1``; the probe's splits and joint model from ``$WILDMERGE_DEMO_PROBE_SEED``, default 0).
    ``build=False``: the reference's name checked only (an unknown one refused), nothing built, None returned.
    """
    if not isinstance(ref, str) or not ref.startswith("demo:"):
        raise ConfigError(f"{ref!r} is not a demo reference; write demo:base, demo:expert_01 or demo:tasks")
    name = ref[len("demo:"):]
    quick = quick_forced()
    experts = [e.name for e in S.experts_for(quick)]
    kind, _, expert = name.partition("/")
    if expert and kind in ("unlabelled", "calibration"):  # an expert's own data (demo/unlabelled.py, calibration.py)
        from wildmerge.families.demo.calibration import calibration_file
        from wildmerge.families.demo.unlabelled import unlabelled_file

        if expert not in experts:
            raise FAMILY.unknown(ref, expert, experts, "demo data")
        if not build:
            return None
        info = ensure_family(seed=FAMILY.env_seed("SEED"), quick=quick)
        return str((calibration_file if kind == "calibration" else unlabelled_file)(info, expert))
    if name == "large_tasks" and not build:
        return None
    if name == "large_tasks":  # the demo suite's larger variant (demo/large.py), written next to the family
        from wildmerge.families.demo.large import write_large_tasks

        return write_large_tasks(ensure_family(seed=FAMILY.env_seed("SEED"), quick=quick))
    from wildmerge.families.demo.probe_data import ensure_probe_data

    return FAMILY.resolve(ref, experts, [e.name for e in S.EXPERTS], ensure_family, ensure_probe_data, build)


def task_names_of(ref: str) -> list | None:
    """The lm-eval task names of a family task folder (``demo:tasks``), known without building; None for the
    folders written with the family (``demo:large_tasks``, ``demo:probe_tasks``): checked when read."""
    from wildmerge.families.demo.tasks import task_names

    return task_names() if ref == "demo:tasks" else None
