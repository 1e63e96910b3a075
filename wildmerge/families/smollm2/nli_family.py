"""The cached SmolLM2 NLI experts: built once, validated every time, resolved from ``smollm2:`` references.

Chain of Merges' LLM column merges LoRA experts fine-tuned on NLI datasets; this is its analogue on SmolLM2-135M:
one LoRA adapter per generated NLI genre (``nli.py``), fine-tuned on the CPU from the same dequantised base as the
family. It is a folder of its own, beside the family's in the same cache (``<cache>/nli<V>-seed<S>[-quick]/``,
through ``families/cache.py``: a claim, the SHA-256 of every file in ``family.json``, an atomic rebuild), holding
its own copy of the base, so the NLI pool needs neither the family's experts nor their build.

References (``family.resolve_smollm2_ref`` hands every ``nli_`` name here): ``smollm2:nli_base``,
``smollm2:nli_<genre>`` (an adapter), ``smollm2:nli_tasks`` (the held-out items and their lm-eval tasks),
``smollm2:nli_pool`` (a pool file with absolute paths), and each expert's data ``smollm2:text/nli_<genre>`` and
``smollm2:labelled/nli_<genre>``. ``WILDMERGE_SMOLLM2_QUICK=1`` makes the quick variant (two experts, a few steps,
six held-out items per genre), ``WILDMERGE_SMOLLM2_SEED`` the seed, as for the family.
"""

import functools
from pathlib import Path

from wildmerge.families import cache as C, kernels
from wildmerge.families.smollm2 import nli_spec as N

FAMILY = C.CachedFamily(label="smollm2", title="SmolLM2 NLI", env="WILDMERGE_SMOLLM2", tell_waits=True,
                        build_cost="about 10 to 20 minutes of one CPU core (estimated from a pilot)")
REFS = ("nli_base", "nli_tasks", "nli_pool")


def nli_key(seed: int, quick: bool) -> str:
    """``nli<version>-seed<seed>[-default|-native][-quick]``: beside the family's ``v<builder>-...`` folders."""
    suffix = kernels.key_suffix(kernels.level(FAMILY.env))
    return f"nli{N.NLI_VERSION}-seed{seed}{suffix}" + ("-quick" if quick else "")


def problem(root) -> str | None:
    """Why the folder at ``root`` cannot be used, or None when it is complete and intact."""
    return C.problem(root, N.NLI_VERSION, _needed, keys=("experts",))


def _needed(manifest: dict) -> list:
    experts = manifest["experts"]
    return (["base/model.safetensors", "base/config.json", "base/tokenizer.json"]
            + [f"{e['path']}/adapter_model.safetensors" for e in experts]
            + [rel for e in experts for rel in e["data"].values()])


def _describe(root: Path, manifest: dict) -> dict:
    experts = manifest["experts"]
    size = f"{'quick, ' if manifest['quick'] else ''}seed {manifest['seed']}"
    info = FAMILY.describe(root, manifest, f"SmolLM2-135M-Instruct and {len(experts)} LoRA experts fine-tuned on "
                                           f"generated NLI genres ({size})")
    info["pool"] = {**info["pool"], "name": "smollm2_nli", "base": {"model": "smollm2:nli_base"}}
    return {**info, "data": {e["name"]: {k: str(root / v) for k, v in e["data"].items()} for e in experts}}


def _write_derived(root: Path, info: dict) -> None:
    """Task YAMLs and a pool file with absolute paths for where the folder is now (cheap, idempotent)."""
    from wildmerge.families import tasks as T

    T.write_task_yamls(root / "tasks", {N.TASK_PREFIX + n.removeprefix(N.NAME_PREFIX): n for n in
                                        (N.expert_name(g) for g in _genres())},
                       "wildmerge SmolLM2 NLI genre '{skill}', held out", {})
    experts = [{"model": info["experts"][e["name"]], "name": e["name"], "domain": "nli",
                "data": info["data"][e["name"]], "tasks": [e["name"].removeprefix(N.NAME_PREFIX)]}
               for e in info["pool"]["experts"]]
    C.write_pool_file(info, experts)


def _genres() -> tuple:
    from wildmerge.families.smollm2.nli import GENRES

    return GENRES


def _build(out, seed: int, quick: bool, threads: int, progress: bool) -> None:
    """Build into ``out``: with pinned kernels in a child process, or here with native ones."""
    from wildmerge.families.smollm2.nli_build import build_nli

    size = "quick" if quick else "full"
    kernels.build("smollm2 nli", FAMILY.env, "wildmerge.families.smollm2.nli_build",
                  [out, seed, size, threads, "progress" if progress else "quiet"],
                  lambda level: build_nli(out, seed=seed, quick=quick, threads=threads, progress=progress,
                                          kernels_level=level))


def ensure_nli(cache_dir=None, seed: int = 0, quick: bool = False, threads: int = 1, progress: bool = True,
               rebuild: bool = False) -> dict:
    """The NLI experts for ``seed``: reused when the cache is intact, built (or rebuilt) otherwise. Returns paths:
    ``root``, ``base``, ``experts`` ({name: adapter folder}), ``data`` ({name: {text, labelled}}), ``tasks``,
    ``task_names``, ``pool_file`` and ``manifest``."""
    from wildmerge.families.smollm2.source import missing

    quick = bool(quick) or FAMILY.quick_forced()
    build = functools.partial(_build, threads=threads, progress=progress)
    return C.ensure(FAMILY, cache_dir, seed, quick, family_key=nli_key, check=problem, build=build,
                    describe=_describe, write_derived=_write_derived, rebuild=rebuild, cannot_build=missing)


def resolve_nli_ref(ref: str, build: bool = True) -> str | None:
    """The path behind an NLI reference (``smollm2:nli_base``, ``smollm2:nli_<genre>``, ``smollm2:nli_tasks``,
    ``smollm2:nli_pool``, ``smollm2:text/nli_<genre>``, ``smollm2:labelled/nli_<genre>``); ``build=False``: the
    name checked only, None returned. An unknown name is a ConfigError listing the valid ones."""
    name = ref.removeprefix("smollm2:")
    kind, _, expert = name.partition("/")
    quick = FAMILY.quick_forced()
    experts = N.expert_names(quick)
    every = N.expert_names(False)
    hint = (f"; the quick NLI experts are {', '.join(experts)}: unset WILDMERGE_SMOLLM2_QUICK"
            if (expert or name) in every and (expert or name) not in experts else "")
    if expert:
        if kind not in ("text", "labelled") or expert not in experts:
            raise FAMILY.unknown(ref, expert, experts, f"SmolLM2 NLI {kind} data", hint)
    elif name not in (*REFS, *experts):
        raise FAMILY.unknown(ref, name, [*REFS, *experts], "SmolLM2 NLI model", hint)
    if not build:
        return None
    info = ensure_nli(seed=FAMILY.env_seed("SEED"), quick=quick)
    if expert:
        return info["data"][expert][kind]
    return {"nli_base": info["base"], "nli_tasks": info["tasks"], "nli_pool": info["pool_file"]}.get(
        name) or info["experts"][name]


def is_nli_ref(ref: str) -> bool:
    """Whether a ``smollm2:`` reference names the NLI experts (``nli_...``, ``text/nli_...``)."""
    name = ref.removeprefix("smollm2:")
    return name.startswith(N.NAME_PREFIX) or name.partition("/")[2].startswith(N.NAME_PREFIX)

