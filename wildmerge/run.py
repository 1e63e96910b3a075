"""The run folder: the contract between the sampler, the evaluation harness, the report and the diagnostics.

A run folder is what ``wildmerge sample`` writes and every other command reads::

    RUN/
      manifest.json         the pool as resolved (hub ids pinned to commit hashes) and the drawn subsets: written once
      subsets.csv           the same subsets, for people
      plan.json             every model of the run: base, experts alone, merges (method x subset x hyperparameters)
      models/<model_id>/    one merged model, complete or absent, with recipe.yml and merge_info.json
      eval/<suite>/         index.json (model id -> job id, job specs), results/, logs/ (owned by wildmerge.eval)
      report/               leaderboard tables and plots
      sample_log.json       what the last ``wildmerge sample`` did

Each JSON record is a pydantic model with a ``schema_version``. Folders written before records had a version
(version 0) load unchanged: the fields they lack get their defaults. A record written by a newer wildmerge is
refused with a message instead of being misread.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Type, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from wildmerge.atomic import write_json
from wildmerge.errors import WildmergeError

SCHEMA_VERSION = 1

PLAN, MANIFEST, SUBSETS_CSV, SAMPLE_LOG = "plan.json", "manifest.json", "subsets.csv", "sample_log.json"
MERGE_INFO, RECIPE = "merge_info.json", "recipe.yml"
EVAL_INDEX = "index.json"
CLAIMS, WEIGHT_CHECKS = "claims", "weight_checks.json"


class Record(BaseModel):
    """A versioned JSON record; unknown keys are kept, so an older wildmerge reading a newer minor field loses
    nothing when it writes the record back."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_version: int = SCHEMA_VERSION

    @model_validator(mode="before")
    @classmethod
    def _version(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            data.setdefault("schema_version", 0)  # written before records were versioned
            if isinstance(data["schema_version"], int) and data["schema_version"] > SCHEMA_VERSION:
                raise ValueError(f"schema_version {data['schema_version']} is newer than this wildmerge understands "
                                 f"({SCHEMA_VERSION}); upgrade wildmerge")
        return data


# --- plan.json ------------------------------------------------------------------------------------------------


class PlanEntry(BaseModel):
    """One model of a run: the base, an expert alone, or a merge of a subset with one method and hyperparameters."""

    model_config = ConfigDict(extra="allow")

    model_id: str
    kind: Literal["base", "expert", "merge", "composition"]  # composition: ensemble / composer of a subset
    path: str
    method: Optional[str] = None
    label: str = ""
    n: Optional[int] = None
    subset_id: Optional[str] = None
    hparams: Dict[str, Any] = Field(default_factory=dict)  # every hyperparameter of the merge
    overrides: Dict[str, Any] = Field(default_factory=dict)  # those that differ from the method recipe
    experts: List[str] = Field(default_factory=list)
    domain: Optional[str] = None
    ablations: List[str] = Field(default_factory=list)  # the sweeps this merge is a point of

    @model_validator(mode="after")
    def _defaults(self) -> "PlanEntry":
        if not self.label:
            self.label = self.model_id
        if self.n is None and self.kind != "merge":
            self.n = 0 if self.kind == "base" else 1
        return self


class Plan(Record):
    run: str = ""
    run_dir: str = ""
    pool: str = ""
    methods: List[str] = Field(default_factory=list)
    ablations: List[str] = Field(default_factory=list)
    entries: List[PlanEntry]

    @model_validator(mode="after")
    def _consistent(self) -> "Plan":
        seen = set()
        for e in self.entries:
            if e.model_id in seen:
                raise ValueError(f"model_id {e.model_id!r} appears twice")
            seen.add(e.model_id)
        bases = [e for e in self.entries if e.kind == "base"]
        if len(bases) != 1:
            raise ValueError(f"expected exactly one base entry, found {len(bases)}")
        return self

    @property
    def merges(self) -> List[PlanEntry]:
        return [e for e in self.entries if e.kind == "merge"]


def merged_with_previous(previous: List[PlanEntry], entries: List[PlanEntry]) -> List[PlanEntry]:
    """This invocation's entries (their metadata wins, the base first), then earlier entries it did not plan
    again (e.g. methods an earlier invocation added)."""
    ids = {e.model_id for e in entries}
    return list(entries) + [e for e in previous if e.model_id not in ids]


# --- manifest.json --------------------------------------------------------------------------------------------


class ResolvedModel(BaseModel):
    """A pool model as resolved on the machine that drew the subsets."""

    model_config = ConfigDict(extra="allow")

    name: str
    model: str  # the reference as written in the pool
    kind: str  # local | demo | hub
    path: str
    revision: Optional[str] = None  # commit hash for hub models
    domain: Optional[str] = None
    calibration: Any = None  # per-expert data for RegMean / CoM / diagnostics


class PoolModels(BaseModel):
    base: ResolvedModel
    experts: List[ResolvedModel]

    def by_name(self) -> Dict[str, ResolvedModel]:
        return {e.name: e for e in self.experts}


class SubsetRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    subset_id: str
    n: int
    experts: List[str]
    exhaustive: bool = False
    domain: Optional[str] = None


class Manifest(Record):
    pool: str
    pool_file: Optional[str] = None
    description: str = ""
    seed: int
    sizes: List[int]
    k: int
    combinations: Dict[str, Dict[str, Any]] = Field(default_factory=dict)  # n -> {total, taken, exhaustive}
    notes: List[str] = Field(default_factory=list)
    subsets: List[SubsetRecord]
    models: PoolModels
    sampling: Dict[str, Any]  # the settings of the draw; a rerun with other settings is refused
    tuned: Dict[str, Any] = Field(default_factory=dict)  # method -> hyperparameters chosen by TAS (sample --tune)
    created: str = ""
    wildmerge: str = ""


# --- models/<id>/merge_info.json ------------------------------------------------------------------------------


class MergeInfo(Record):
    """Written last into a merged model's folder: its presence with the same ``recipe_sha256`` means done."""

    model_id: str = ""
    method: Optional[str] = None
    label: str = ""
    n: Optional[int] = None
    subset_id: Optional[str] = None
    hparams: Dict[str, Any] = Field(default_factory=dict)
    experts: List[str] = Field(default_factory=list)
    recipe_sha256: str = ""
    seconds: Optional[float] = None
    mergekit: str = ""
    finished: str = ""
    weights_pruned: bool = False  # --keep-models none removed the weights after evaluation


# --- eval/<suite>/index.json ----------------------------------------------------------------------------------


class EvalIndex(Record):
    """Which job scores which model of a run on one suite; the jobs' specs (``wildmerge.eval.jobs``)."""

    suite: str = ""
    suite_source: Optional[str] = None
    models: Dict[str, str] = Field(default_factory=dict)  # model id -> job id
    jobs: Dict[str, Dict[str, Any]] = Field(default_factory=dict)


# --- reading and writing ----------------------------------------------------------------------------------------

R = TypeVar("R", bound=BaseModel)


def read_record(path, model: Type[R], fix: str) -> R:
    """Load and validate one record; a damaged one is an error that names the file and how to fix it."""
    path = Path(path)
    try:
        return model.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        where = str(exc)
        if first:
            where = first["msg"].removeprefix("Value error, ")
            where = f"{'.'.join(map(str, first['loc']))}: {where}" if first["loc"] else where
        raise WildmergeError(f"{path} is damaged ({where}); {fix}") from None


def write_record(path, record: BaseModel) -> Path:
    return write_json(path, record.model_dump(mode="json", by_alias=True))


class RunFolder:
    """Paths and records of one run folder; the only code that knows its layout."""

    def __init__(self, root):
        self.root = Path(root).resolve()
        self.name = self.root.name
        self.plan_path = self.root / PLAN
        self.manifest_path = self.root / MANIFEST
        self.subsets_csv = self.root / SUBSETS_CSV
        self.sample_log = self.root / SAMPLE_LOG
        self.models_dir = self.root / "models"

    def model_dir(self, model_id: str) -> Path:
        return self.models_dir / model_id

    def eval_dir(self, suite: str) -> Path:
        return self.root / "eval" / suite

    def report_dir(self) -> Path:
        return self.root / "report"

    def evaluated_suites(self) -> List[str]:
        root = self.root / "eval"
        return sorted(p.name for p in root.iterdir() if (p / EVAL_INDEX).is_file()) if root.is_dir() else []

    # records
    def has_plan(self) -> bool:
        return self.plan_path.is_file()

    def read_plan(self) -> Plan:
        if not self.plan_path.is_file():
            raise WildmergeError(f"{self.root} is not a run folder: plan.json is missing (create a run with "
                                 f"`wildmerge sample`, or use `wildmerge eval --model PATH` for single models)")
        return read_record(self.plan_path, Plan, "rerun `wildmerge sample` with the run's settings to rewrite it")

    def write_plan(self, plan: Plan) -> Path:
        return write_record(self.plan_path, plan)

    def read_manifest(self) -> Optional[Manifest]:
        if not self.manifest_path.is_file():
            return None
        return read_record(self.manifest_path, Manifest, "it holds the run's subsets: restore it, or start a new run "
                                                         "with --out")

    def write_manifest(self, manifest: Manifest) -> Path:
        return write_record(self.manifest_path, manifest)

    def read_eval_index(self, suite: str) -> "EvalIndex":
        return read_eval_index(self.eval_dir(suite))

    def write_eval_index(self, suite: str, index: "EvalIndex") -> Path:
        return write_eval_index(self.eval_dir(suite), index)


def read_eval_index(store_root) -> EvalIndex:
    """The index of an evaluation store folder (a run's ``eval/<suite>/`` or an ad hoc results folder); an absent or
    unreadable one is empty: the next evaluation rebuilds it from the job results."""
    path = Path(store_root) / EVAL_INDEX
    try:
        return EvalIndex.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError):
        return EvalIndex()


def write_eval_index(store_root, index: EvalIndex) -> Path:
    return write_record(Path(store_root) / EVAL_INDEX, index)


def read_merge_info(model_dir) -> Optional[MergeInfo]:
    """A merged model's info, or None when the folder has none or a damaged one (then it is merged again)."""
    try:
        return MergeInfo.model_validate(json.loads((Path(model_dir) / MERGE_INFO).read_text()))
    except (OSError, ValueError, ValidationError):
        return None


def write_merge_info(model_dir, info: MergeInfo) -> Path:
    return write_record(Path(model_dir) / MERGE_INFO, info)


# --- claims and checks shared by concurrent commands --------------------------------------------------------------


def merge_claim_file(model_dir) -> Path:
    """The lock file that claims the merge into ``RUN/models/<id>``: ``RUN/claims/merge-<id>.lock``."""
    model_dir = Path(model_dir)
    return model_dir.parent.parent / CLAIMS / f"merge-{model_dir.name}.lock"


def eval_claim_file(store_root, job_id: str) -> Path:
    """The lock file that claims one evaluation job of a result store: ``<store>/claims/<job id>.lock``."""
    return Path(store_root) / CLAIMS / f"{job_id}.lock"


def generated_calibration_dir(model_dir) -> Path:
    """Where calibration text generated by the experts is cached for the run of ``RUN/models/<id>``:
    ``RUN/calibration/``."""
    return Path(model_dir).parent.parent / "calibration"


def report_claim_file(run_dir) -> Path:
    """The lock file held while a report of the run is written: ``RUN/claims/report.lock``."""
    return Path(run_dir) / CLAIMS / "report.lock"


class WeightChecks(Record):
    """Weight files already found free of NaN / Inf, as {absolute path: "size:mtime_ns"}; a changed file is checked
    again."""

    finite: Dict[str, str] = Field(default_factory=dict)


def read_weight_checks(run_dir) -> WeightChecks:
    """The run's record of checked weight files; an absent or damaged one is empty (the files are checked again)."""
    try:
        return WeightChecks.model_validate(json.loads((Path(run_dir) / WEIGHT_CHECKS).read_text()))
    except (OSError, ValueError, ValidationError):
        return WeightChecks()


def write_weight_checks(run_dir, checks: WeightChecks) -> Path:
    return write_record(Path(run_dir) / WEIGHT_CHECKS, checks)
