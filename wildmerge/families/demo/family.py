"""The cached demo family: build once, validate every time, resolve ``demo:<name>`` references.

A family lives in ``<cache>/v<builder version>-seed<seed>[-default|-native][-quick][-random<S>t<T>]/`` (the last part:
a partition family, ``partition.py``) and is used only if its
``family.json`` and every file's SHA-256 check out; a partial, corrupted or stale folder is rebuilt, never used
(``families/cache.py``: the claim, the checks and the atomic rebuild, shared with the SmolLM2 family).
"""

import functools
import os
from pathlib import Path

from wildmerge.families.demo import spec as S
from wildmerge.families.demo.partition import canonical, env_partition, experts_of, key_suffix
from wildmerge.errors import ConfigError
from wildmerge.families import cache as C, kernels

# the calibration/ and tasks_large/ files are derived (rewritten on use), not data
FAMILY = C.CachedFamily(label="demo", title="demo", env="WILDMERGE_DEMO", unsigned_dirs=("calibration", "tasks_large"))


def default_cache_dir() -> Path:
    """``$WILDMERGE_DEMO_CACHE`` or ``~/.cache/wildmerge/demo``."""
    return FAMILY.default_cache_dir()


def quick_forced() -> bool:
    return FAMILY.quick_forced()


def family_key(seed: int, quick: bool, partition: str | None = None) -> str:
    """``v<builder>-seed<seed>[-default|-native][-quick][-random<S>t<T>]``: the kernels are part of the family
    (``families/kernels.py``), and so is a partition (``partition.py``)."""
    suffix = kernels.key_suffix(kernels.level(FAMILY.env))
    return f"v{S.BUILDER_VERSION}-seed{seed}{suffix}" + ("-quick" if quick else "") + key_suffix(partition)


def _build(out, seed: int, quick: bool, threads: int, progress: bool, partition: str | None = None) -> None:
    """Train the family into ``out``: with pinned kernels in a child process (ATen reads its kernel level once per
    process, at start-up), or here with this machine's native ones."""
    from wildmerge.families.demo.build import build_family

    size = "quick" if quick else "full"
    kernels.build("demo", FAMILY.env, "wildmerge.families.demo.build",
                  [out, seed, size, threads, "progress" if progress else "quiet"] + ([partition] if partition else []),
                  lambda level: build_family(out, seed=seed, quick=quick, threads=threads, progress=progress,
                                             kernels_level=level, partition=partition))


def problem(root) -> str | None:
    """Why the family at ``root`` cannot be used, or None when it is complete and intact."""
    return C.problem(root, S.BUILDER_VERSION, _needed)


def _needed(manifest: dict) -> list:
    return (["base/model.safetensors", "base/config.json", "base/tokenizer.json"]
            + [f"{e['path']}/model.safetensors" for e in manifest.get("experts", [])])


def _describe(root: Path, manifest: dict) -> dict:
    partition = (manifest.get("partition") or {}).get("name")
    size = f"{'quick, ' if manifest['quick'] else ''}seed {manifest['seed']}" + (f", {partition}" if partition else "")
    info = FAMILY.describe(root, manifest, f"wildmerge synthetic demo family ({size}): a Qwen3 base and "
                                           f"{len(manifest['experts'])} experts fine-tuned on synthetic skills")
    return {**info, "partition": partition}


def _write_derived(root: Path, info: dict) -> None:
    """Task YAMLs, the experts' items and a pool file with absolute paths for where the family is now (cheap,
    idempotent)."""
    from wildmerge.families.demo.calibration import write_calibration
    from wildmerge.families.demo.tasks import write_task_yamls

    write_task_yamls(root / "tasks")
    calibration = write_calibration(root, info["seed"], info["quick"], info.get("partition"))
    C.write_pool_file(info, [{"model": info["experts"][e["name"]], "name": e["name"], "domain": e["domain"],
                              "calibration": calibration[e["name"]]} for e in info["pool"]["experts"]])


def ensure_family(cache_dir=None, seed: int = 0, quick: bool = False, threads: int = 1,
                  progress: bool = True, rebuild: bool = False, partition: str | None = None) -> dict:
    """The demo family for ``seed`` (and ``partition``, ``random:SEED:T``: its partition family, ``partition.py``):
    reused when the cache is intact, built (or rebuilt) otherwise.

    ``WILDMERGE_DEMO_QUICK=1`` forces the quick family (3 experts, tiny, seconds). Returns paths: ``root``,
    ``base``, ``experts`` ({name: path}), ``tasks`` (lm-eval include path), ``task_names``, ``pool`` (pool entries
    with ``demo:`` references, domains and descriptions), ``pool_file`` (a pool YAML with absolute paths), and
    ``manifest`` (``family.json``: how it was built, losses, versions, checksums).
    """
    quick, partition = bool(quick) or quick_forced(), canonical(partition)
    build = functools.partial(_build, threads=threads, progress=progress, partition=partition)
    key = functools.partial(family_key, partition=partition)
    return C.ensure(FAMILY, cache_dir, seed, quick, family_key=key, check=problem, build=build,
                    describe=_describe, write_derived=_write_derived, rebuild=rebuild)


def resolve_demo_ref(ref: str, build: bool = True) -> str | None:
    """Absolute path for ``demo:base``, ``demo:expert_01`` ... ``demo:expert_12``, ``demo:tasks``, ``demo:pool``,
    an expert's data ``demo:unlabelled/<expert>`` / ``demo:calibration/<expert>``, the large suite's tasks
    ``demo:large_tasks`` (``large.py``), or the probe's additions
    ``demo:probe_tasks`` and ``demo:joint`` (the joint multi-skill reference model).

    Builds the family on first use (seed from ``$WILDMERGE_DEMO_SEED``, default 0; the quick family when
    ``$WILDMERGE_DEMO_QUICK=1``; the partition family of ``$WILDMERGE_DEMO_PARTITION=random:SEED:T`` when set,
    ``partition.py``; the probe's splits and joint model from ``$WILDMERGE_DEMO_PROBE_SEED``, default 0).
    ``build=False``: the reference's name checked only (an unknown one refused), nothing built, None returned.
    """
    if not isinstance(ref, str) or not ref.startswith("demo:"):
        raise ConfigError(f"{ref!r} is not a demo reference; write demo:base, demo:expert_01 or demo:tasks")
    name = ref[len("demo:"):]
    quick, partition = quick_forced(), env_partition()
    experts = [e.name for e in experts_of(quick, partition)]
    family = functools.partial(ensure_family, partition=partition)
    kind, _, expert = name.partition("/")
    if expert and kind in ("unlabelled", "calibration"):  # an expert's own data (demo/unlabelled.py, calibration.py)
        from wildmerge.families.demo.calibration import calibration_file
        from wildmerge.families.demo.unlabelled import unlabelled_file

        if expert not in experts:
            raise FAMILY.unknown(ref, expert, experts, "demo data")
        if not build:
            return None
        info = family(seed=FAMILY.env_seed("SEED"), quick=quick)
        return str((calibration_file if kind == "calibration" else unlabelled_file)(info, expert))
    if name == "large_tasks" and not build:
        return None
    if name == "large_tasks":  # the demo suite's larger variant (demo/large.py), written next to the family
        from wildmerge.families.demo.large import write_large_tasks

        return write_large_tasks(family(seed=FAMILY.env_seed("SEED"), quick=quick))
    from wildmerge.families.demo.probe_data import ensure_probe_data

    every = experts if partition else [e.name for e in S.EXPERTS]
    return FAMILY.resolve(ref, experts, every, family, ensure_probe_data, build)


def task_names_of(ref: str) -> list | None:
    """The lm-eval task names of a family task folder (``demo:tasks``), known without building; None for the
    folders written with the family (``demo:large_tasks``, ``demo:probe_tasks``): checked when read."""
    from wildmerge.families.demo.tasks import task_names

    return task_names() if ref == "demo:tasks" else None


def tasks_beside(ref: str, paths) -> str | None:
    """``demo:tasks`` of the built family that holds one of ``paths`` (the models scored: a quick family's
    ``pool.yml`` names that family's folders), whichever family the environment selects; None when no path lies
    in one (the reference then resolves as usual)."""
    from wildmerge.families.demo.tasks import task_names

    def key_of(manifest: dict) -> str:
        return family_key(manifest["seed"], manifest["quick"], (manifest.get("partition") or {}).get("name"))

    found = C.built_root(paths, task_names(), key_of) if ref == "demo:tasks" else None
    if found is None:
        return None
    root, manifest = found
    return ensure_family(root.parent, seed=manifest["seed"], quick=manifest["quick"], progress=False,
                         partition=(manifest.get("partition") or {}).get("name"))["tasks"]
