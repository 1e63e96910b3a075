"""Model references -> local folders: the one resolver for merging, RegMean / CoM, evaluation, diagnostics and
the sampler.

A reference is a local folder (absolute, or relative to a pool file), ``demo:<name>`` or ``smollm2:<name>`` (the
synthetic demo family, or SmolLM2-135M and its experts, built and cached on first use) or a hub id ``org/name`` at
an optional revision, served from huggingface_hub's cache.
Hub ids are pinned to a commit hash (the snapshot folder name in the cache), so a run's manifest names exactly the
weights it merged. Offline, every uncached model is listed in one error together with the command that fetches it,
before any merge starts.
"""

import os
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from wildmerge.errors import WildmergeError

# Files a merge and an evaluation need; pickled weights are fetched only with allow_pickle.
SAFE_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]
PICKLE_PATTERNS = ["*.bin", "*.pt", "*.pth"]


class ResolvedModel(BaseModel):
    """A model reference resolved to a folder on this machine; the manifest records the pool's models as these."""

    model_config = ConfigDict(extra="allow")  # e.g. ``adapter``: the adapter folder a full model was made from

    name: str = ""  # the pool's label (resolve_all), "base"
    model: str  # the reference as written in the pool
    kind: str  # local | demo | hub (| unresolved in a dry run)
    path: str  # absolute folder
    revision: Optional[str] = None  # commit hash for hub models
    domain: Optional[str] = None
    calibration: Any = None  # per-expert data for RegMean / CoM / diagnostics


# references into the locally built families (wildmerge.families): the synthetic demo and the SmolLM2 family
FAMILY_PREFIXES = ("demo:", "smollm2:")


class Unresolvable(WildmergeError):
    """A reference that is not a local folder, not a demo model and not a (cached) hub id."""


NOT_CACHED = "not in the local Hugging Face cache"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def family_ref_in_recipe(ref: str) -> str:
    """Why a mergekit recipe cannot name ``demo:`` / ``smollm2:`` models (mergekit reads folders and hub ids only),
    and what to write instead."""
    family = ref.split(":", 1)[0]
    build = "wildmerge demo build" + (f" --family {family}" if family != "demo" else "")
    return (f"model {ref!r} is a wildmerge family reference, which mergekit cannot read: write the model's folder "
            f"instead (`{build}` builds the family and prints every model's folder), or list the models in a pool "
            f"and run `wildmerge sample --base POOL`")


def classify(ref: str, relative_to: Path | None = None) -> tuple[str, str]:
    """('demo' | 'local' | 'hub', normalised ref); raises Unresolvable for something that is none of them."""
    if ref.startswith(FAMILY_PREFIXES):
        return "demo", ref
    candidates = [Path(ref).expanduser()]
    if relative_to is not None and not Path(ref).is_absolute():
        candidates.insert(0, relative_to / ref)
    for c in candidates:
        if c.exists():
            return "local", str(c.resolve())
    if ref.startswith(("/", ".", "~")) or os.sep in ref.strip("/").replace("/", "", 1):
        raise Unresolvable(f"{ref!r}: local folder does not exist")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(ref)
    except HFValidationError as exc:
        raise Unresolvable(f"{ref!r} is neither an existing local folder nor a valid hub id ({exc})") from None
    if "/" not in ref:
        raise Unresolvable(f"{ref!r} is neither an existing local folder nor a hub id of the form org/name")
    return "hub", ref


def resolve(ref: str, revision: str | None = None, *, relative_to=None, allow_pickle=False, download=None,
            cache_dir=None) -> ResolvedModel:
    """Resolve one reference; hub models come from the cache (``cache_dir`` or huggingface_hub's default), and are
    fetched when online and ``download`` (default: unless HF_HUB_OFFLINE is set)."""
    kind, norm = classify(str(ref), relative_to)
    if kind == "local":
        return ResolvedModel(model=ref, kind="local", path=norm)
    if kind == "demo":
        path = Path(_family(ref).resolve(ref)).resolve()  # families/ imports nothing above it
        return ResolvedModel(model=ref, kind="demo", path=str(path))
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    download = (not offline()) if download is None else download
    patterns = SAFE_PATTERNS + (PICKLE_PATTERNS if allow_pickle else [])
    try:
        path = snapshot_download(ref, revision=revision, local_files_only=not download, allow_patterns=patterns,
                                 cache_dir=cache_dir)
    except (LocalEntryNotFoundError, FileNotFoundError):
        raise Unresolvable(f"{ref!r}" + (f" at revision {revision}" if revision else "") + ": " + NOT_CACHED) from None
    except HfHubHTTPError as exc:
        raise Unresolvable(f"{ref!r}: the hub refused it ({exc.__class__.__name__}: {str(exc).splitlines()[0]})") from None
    path = Path(path).resolve()
    return ResolvedModel(model=ref, kind="hub", path=str(path), revision=path.name)


class _Family:
    """A family's resolver, the names of its task folders and the task folder beside given models
    (``families/<family>/family.py``)."""

    def __init__(self, resolve, task_names_of, tasks_beside):
        self.resolve, self.task_names_of, self.tasks_beside = resolve, task_names_of, tasks_beside


def _family(ref: str) -> _Family:
    try:
        if ref.startswith("smollm2:"):
            from wildmerge.families.smollm2 import resolve_smollm2_ref as resolve_ref, task_names_of, tasks_beside
        else:
            from wildmerge.families.demo import resolve_demo_ref as resolve_ref, task_names_of, tasks_beside
    except ImportError:
        raise Unresolvable(f"{ref!r}: the demo families (wildmerge.families) are not in this install") from None
    return _Family(resolve_ref, task_names_of, tasks_beside)


def check_family_ref(ref: str) -> None:
    """A ``demo:`` / ``smollm2:`` reference's name checked without building its family: an unknown one is a
    ConfigError naming the valid ones (a pool's data, checked when the pool is loaded, dry runs included)."""
    _family(ref).resolve(ref, build=False)


def family_task_names(ref: str):
    """The lm-eval task names in a family's task folder (``demo:tasks``), known without building; None when only
    the built folder says (checked when it is read)."""
    return _family(ref).task_names_of(ref)


def family_tasks_beside(ref: str, paths) -> str | None:
    """The task folder ``ref`` (``smollm2:tasks``) names, taken from the built family that holds one of ``paths``
    (a pool's base or experts): a quick family's pool scored with the family's suite reads the quick family's tasks,
    whatever size the environment selects; None when no path lies in a built family (resolve ``ref`` as usual)."""
    return _family(ref).tasks_beside(ref, paths)


def every_family_task() -> dict:
    """{task name: its family's task folder} of the embedded families' own tasks (a hint for a misplaced name)."""
    return {name: folder for folder in ("demo:tasks", "smollm2:tasks") for name in family_task_names(folder) or ()}


def fetch_command(ref: str, revision: str | None, allow_pickle=False) -> str:
    include = " ".join(f"'{p}'" for p in SAFE_PATTERNS + (PICKLE_PATTERNS if allow_pickle else []))
    rev = f" --revision {revision}" if revision else ""
    return f"hf download {ref}{rev} --include {include}"


def resolve_all(refs, *, relative_to=None, allow_pickle=False, download=None) -> list[ResolvedModel]:
    """Resolve ``[(label, ref, revision)]``; every failure is collected into one error that says how to fix it."""
    from tqdm.auto import tqdm

    out, problems, fetch = [], [], []
    hub_refs = sum(1 for _, ref, _ in refs if not ref.startswith(FAMILY_PREFIXES) and not Path(ref).expanduser().exists())
    for label, ref, revision in tqdm(refs, desc="resolving models", unit="model", disable=hub_refs == 0):
        try:
            out.append(resolve(ref, revision, relative_to=relative_to, allow_pickle=allow_pickle, download=download)
                       .model_copy(update={"name": label}))
        except Unresolvable as exc:
            problems.append(f"  {label}: {exc}")
            if str(exc).endswith(NOT_CACHED):  # "org/name" may also have been meant as a relative folder
                where = relative_to if relative_to is not None else Path.cwd()
                problems[-1] += f", and not a local folder either (looked in {where})"
                fetch.append(fetch_command(ref, revision, allow_pickle))
    if problems:
        msg = f"{len(problems)} model(s) cannot be resolved:\n" + "\n".join(problems)
        if fetch:
            msg += (
                "\nYou are offline (HF_HUB_OFFLINE=1) or downloads are off; fetch them on a machine with network "
                "access (same HF_HOME), then rerun:\n" + "\n".join(f"  {c}" for c in fetch)
            )
        msg += "\nOr fix the ids in the pool file, or leave models out with --exclude NAME."
        raise WildmergeError(msg)
    return out


def resolve_path(ref: str, revision: str | None = None, **kwargs) -> str:
    """The local folder of one reference, or a WildmergeError that says how to get it."""
    try:
        return resolve(ref, revision, **kwargs).path
    except Unresolvable as exc:
        hint = (f"; fetch it with `{fetch_command(ref, revision, kwargs.get('allow_pickle', False))}`"
                if str(exc).endswith(NOT_CACHED) else "; give a model folder, a hub id (org/name) or demo:<name>")
        raise WildmergeError(f"model {exc}{hint}") from None
