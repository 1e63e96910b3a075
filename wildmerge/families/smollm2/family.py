"""The cached SmolLM2 family: build once, validate every time, resolve ``smollm2:<name>`` references.

Like the demo family (``wildmerge.families.demo.family``), through the same cache (``families/cache.py``): it lives in
``<cache>/v<builder version>-seed<seed>[-quick]/`` and is used only if its ``family.json`` and every file's SHA-256
check out; a partial, corrupted or stale folder is rebuilt, never used.
"""

import functools
from pathlib import Path

from wildmerge.families.smollm2 import spec as S
from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.families import cache as C, kernels

PREFIX = "smollm2:"
FAMILY = C.CachedFamily(label="smollm2", title="SmolLM2", env="WILDMERGE_SMOLLM2", tell_waits=True,
                        unsigned_dirs=("tasks_large",),
                        build_cost="the full family takes about 15 minutes on 2 CPU cores (measured)")


def default_cache_dir() -> Path:
    """``$WILDMERGE_SMOLLM2_CACHE`` or ``~/.cache/wildmerge/smollm2``."""
    return FAMILY.default_cache_dir()


def quick_forced() -> bool:
    return FAMILY.quick_forced()


def family_key(seed: int, quick: bool) -> str:
    """``v<builder>-seed<seed>[-default|-native][-quick]``: the kernels are part of the family (``families/kernels.py``)."""
    suffix = kernels.key_suffix(kernels.level(FAMILY.env))
    return f"v{S.BUILDER_VERSION}-seed{seed}{suffix}" + ("-quick" if quick else "")


def problem(root) -> str | None:
    """Why the family at ``root`` cannot be used, or None when it is complete and intact."""
    return C.problem(root, S.BUILDER_VERSION, _needed, keys=("experts",))


def _needed(manifest: dict) -> list:
    experts = manifest["experts"]
    return (["base/model.safetensors", "base/config.json", "base/tokenizer.json"]
            + [f"{e['path']}/{'adapter_model' if e['shape'] == 'lora' else 'model'}.safetensors" for e in experts]
            + [rel for e in experts for rel in (e.get("data") or {}).values()])


def _describe(root: Path, manifest: dict) -> dict:
    experts = manifest["experts"]
    size = f"{'quick, ' if manifest['quick'] else ''}seed {manifest['seed']}"
    info = FAMILY.describe(root, manifest, f"SmolLM2-135M-Instruct and {len(experts)} experts fine-tuned on "
                                           f"generated skills ({size})")
    return {**info, "shapes": {e["name"]: e["shape"] for e in experts},
            "data": {e["name"]: {k: str(root / v) for k, v in e["data"].items()} for e in experts if e.get("data")}}


def pool_entry(expert: dict, model: str, data: dict | None) -> dict:
    """One expert of a pool file: its model, name, domain and data (none: the pool's ``generate`` applies)."""
    entry = {"model": model, "name": expert["name"], "domain": expert["domain"]}
    if data:
        entry["data"] = {"text": data["text"], "labelled": data["labelled"]}
    return entry


def _write_derived(root: Path, info: dict) -> None:
    """Task YAMLs and a pool file with absolute paths for where the family is now (cheap, idempotent)."""
    from wildmerge.families.smollm2.tasks import write_task_yamls

    write_task_yamls(root / "tasks")
    generate = {"data": "generate"} if any(name not in info["data"] for name in info["experts"]) else {}
    C.write_pool_file(info, [pool_entry(e, info["experts"][e["name"]], info["data"].get(e["name"]))
                             for e in info["pool"]["experts"]], **generate)  # for the experts published without data


def _build(out, seed: int, quick: bool, threads: int, progress: bool) -> None:
    """Build the family into ``out``: with pinned kernels in a child process, or here with native ones."""
    from wildmerge.families.smollm2.build import build_family

    size = "quick" if quick else "full"
    kernels.build("smollm2", FAMILY.env, "wildmerge.families.smollm2.build",
                  [out, seed, size, threads, "progress" if progress else "quiet"],
                  lambda level: build_family(out, seed=seed, quick=quick, threads=threads, progress=progress,
                                             kernels_level=level))


def ensure_family(cache_dir=None, seed: int = 0, quick: bool = False, threads: int = 1,
                  progress: bool = True, rebuild: bool = False) -> dict:
    """The SmolLM2 family for ``seed``: reused when the cache is intact, built (or rebuilt) otherwise.

    ``WILDMERGE_SMOLLM2_QUICK=1`` forces the quick family (2 experts, a few steps, a few items). Returns paths:
    ``root``, ``base``, ``experts`` ({name: folder}), ``shapes``, ``data`` ({name: {text, labelled}} for the
    experts published with data), ``tasks`` (lm-eval include path), ``task_names``, ``pool`` (entries with
    ``smollm2:`` references), ``pool_file`` (a pool YAML with absolute paths) and ``manifest`` (``family.json``).
    """
    from wildmerge.families.smollm2.source import missing

    quick = bool(quick) or quick_forced()
    build = functools.partial(_build, threads=threads, progress=progress)
    return C.ensure(FAMILY, cache_dir, seed, quick, family_key=family_key, check=problem, build=build,
                    describe=_describe, write_derived=_write_derived, rebuild=rebuild, cannot_build=missing)


def resolve_smollm2_ref(ref: str, build: bool = True) -> str | None:
    """Absolute path for ``smollm2:base``, ``smollm2:<expert>``, ``smollm2:tasks``, ``smollm2:pool``, an expert's
    data ``smollm2:text/<expert>`` / ``smollm2:labelled/<expert>``, the large suite's tasks ``smollm2:large_tasks``
    (``large.py``), the probe's ``smollm2:probe_tasks`` and
    ``smollm2:joint`` (the joint multi-skill reference model), or the LoRA NLI experts' ``smollm2:nli_...``
    (``nli_family.py``).

    Builds the family on first use (seed from ``$WILDMERGE_SMOLLM2_SEED``, default 0; the quick family when
    ``$WILDMERGE_SMOLLM2_QUICK=1``; the probe's splits and joint model from ``$WILDMERGE_SMOLLM2_PROBE_SEED``).
    ``build=False``: the reference's name checked only (an unknown one refused), nothing built, None returned.
    """
    if not isinstance(ref, str) or not ref.startswith(PREFIX):
        raise ConfigError(f"{ref!r} is not a SmolLM2 family reference; write smollm2:base or smollm2:arithmetic")
    from wildmerge.families.smollm2.nli_family import is_nli_ref, resolve_nli_ref

    if is_nli_ref(ref):  # the LoRA NLI experts, a folder of their own (nli_family.py)
        return resolve_nli_ref(ref, build)
    name, quick = ref[len(PREFIX):], quick_forced()
    experts = [e.name for e in S.experts_for(quick)]
    kind, _, expert = name.partition("/")
    if expert and kind in ("text", "labelled"):
        with_data = [e.name for e in S.experts_for(quick) if e.has_data]
        if expert not in with_data:
            why = " (published without data: its pool entry uses generate)" if expert in experts else ""
            raise ConfigError(f"no SmolLM2 data {ref!r}{why}{did_you_mean(expert, with_data)}; valid: "
                              f"{', '.join(f'{PREFIX}{kind}/{n}' for n in with_data)}")
        if not build:
            return None
        return ensure_family(seed=FAMILY.env_seed("SEED"), quick=quick)["data"][expert][kind]
    if name == "large_tasks" and not build:
        return None
    if name == "large_tasks":  # the suite's larger variant (smollm2/large.py), written next to the family
        from wildmerge.families.smollm2.large import write_large_tasks

        return write_large_tasks(ensure_family(seed=FAMILY.env_seed("SEED"), quick=quick))
    from wildmerge.families.smollm2.probe import ensure_probe_data

    return FAMILY.resolve(ref, experts, [e.name for e in S.EXPERTS], ensure_family, ensure_probe_data, build)


def task_names_of(ref: str) -> list | None:
    """The lm-eval task names of a family task folder (``smollm2:tasks``), known without building; None for the
    folders written with the family (``smollm2:large_tasks``, ``smollm2:probe_tasks``): checked when read."""
    from wildmerge.families.smollm2 import nli_spec
    from wildmerge.families.smollm2.tasks import task_names

    return {"smollm2:tasks": task_names(), "smollm2:nli_tasks": nli_spec.task_names()}.get(ref)


def tasks_beside(ref: str, paths) -> str | None:
    """``smollm2:tasks`` of the built family that holds one of ``paths`` (the models scored: a quick family's
    ``pool.yml`` names that family's folders), whichever family ``$WILDMERGE_SMOLLM2_QUICK`` selects; None when no
    path lies in one (the reference then resolves as usual)."""
    from wildmerge.families.smollm2.tasks import task_names

    found = C.built_root(paths, task_names(), lambda m: family_key(m["seed"], m["quick"])) \
        if ref == "smollm2:tasks" else None
    if found is None:
        return None
    root, manifest = found
    return ensure_family(root.parent, seed=manifest["seed"], quick=manifest["quick"], progress=False)["tasks"]
