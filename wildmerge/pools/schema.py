"""Pools as data: a base model and its public fine-tuned checkpoints ("experts"), validated by pydantic.

A pool file (``merge_recipes/pools/<name>.yml``) only says *which* models; where their weights are is answered
later by ``wildmerge.pools.resolved.resolve`` (hub cache, local folder or ``demo:`` family), so a pool loads
instantly.
"""

import os
from pathlib import Path
from typing import Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.expert_data.schema import ExpertData, for_expert, parse_data
from wildmerge.named_files import find_named_file, list_names, read_yaml


class ModelRef(BaseModel):
    """A hub id (``org/name``, optional ``revision``), a local path or ``demo:<name>``."""

    model_config = ConfigDict(extra="forbid")
    model: str
    revision: str | None = None

    @field_validator("model")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("model must not be empty")
        return v.strip()

    def key(self) -> tuple:
        return (self.model, self.revision)


class BaseRef(ModelRef):
    """The pool's base; ``parameters`` (optional) lets a dry run cost the study before the weights are here."""

    parameters: int | None = Field(None, gt=0)


class Expert(ModelRef):
    name: str | None = None
    domain: str | None = None
    # the expert's own data (expert_data/schema.py): unlabelled text, labelled items; ``calibration:`` is the old name
    data: Optional[ExpertData] = Field(None, validation_alias=AliasChoices("data", "calibration"))
    # the suite task labels this expert was fine-tuned for: its normalized accuracy in the report (merge / expert)
    tasks: list[str] | None = None

    @field_validator("data", mode="before")
    @classmethod
    def _data(cls, v):
        return parse_data(v, "data")

    @property
    def label(self) -> str:
        """Stable short name used in subset lists, model ids and tables."""
        if self.name:
            return self.name
        return self.model.rstrip("/").split("/")[-1].split(":")[-1]


class ProtocolDefaults(BaseModel):
    """What ``wildmerge sample --base POOL`` does when a flag is left out: the embedded families say "fewer subsets,
    evaluate on our suite", so one command runs the protocol end to end on a laptop; hub pools keep the paper's."""

    model_config = ConfigDict(extra="forbid")
    sizes: Optional[list[int]] = None  # subset sizes below N (n = N is added); None: the paper's 1,2,4,6,8,10
    k: Optional[int] = Field(None, ge=1)  # random subsets per size; None: the paper's 15
    methods: Optional[list[str]] = None  # None: the paper's seven
    evaluate: bool = False
    suite: Optional[str] = None

    @model_validator(mode="after")
    def _suite(self):
        if self.evaluate and not self.suite:
            raise ValueError("protocol: evaluate: true needs suite: NAME")
        if self.sizes is not None and (not self.sizes or min(self.sizes) < 1):
            raise ValueError(f"protocol: sizes {self.sizes} must be whole numbers of experts, at least 1")
        return self


class QuickVariant(BaseModel):
    """The experts a pool keeps when an environment variable asks for a smaller family: the demo pool declares
    ``quick: {env: WILDMERGE_DEMO_QUICK, experts: [...]}`` (the quick family builds 3 of its 12 experts), so the
    documented ``--pool demo`` / ``--base demo`` commands run on it as written."""

    model_config = ConfigDict(extra="forbid")
    env: str
    experts: list[str] = Field(min_length=1)

    def asked(self) -> bool:
        return os.environ.get(self.env, "").strip().lower() in ("1", "true", "yes", "on")


class Pool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    base: BaseRef
    experts: list[Expert]
    protocol: ProtocolDefaults = Field(default_factory=ProtocolDefaults)
    quick: Optional[QuickVariant] = None
    # every expert's data where it sets none of its own, part by part (``calibration:`` is the old name)
    data: Optional[ExpertData] = Field(None, validation_alias=AliasChoices("data", "calibration"))
    source: str | None = None  # the file it was loaded from (set by load_pool; resolves relative paths)

    @field_validator("data", mode="before")
    @classmethod
    def _data(cls, v):
        return parse_data(v, "data")

    @model_validator(mode="after")
    def _distinct(self):
        if not self.experts:
            raise ValueError("a pool needs at least one expert under 'experts:'")
        seen, names = {}, {}
        for i, e in enumerate(self.experts, 1):
            if e.key() in seen:
                raise ValueError(f"duplicate expert: #{i} {e.model!r} repeats #{seen[e.key()]}; remove one of them")
            if e.key() == self.base.key():
                raise ValueError(f"expert #{i} {e.model!r} is the base model itself; remove it from 'experts:'")
            if e.label in names:
                raise ValueError(
                    f"experts #{names[e.label]} and #{i} share the name {e.label!r}; give one a distinct 'name:'"
                )
            seen[e.key()], names[e.label] = i, i
        unknown = [n for n in (self.quick.experts if self.quick else []) if n not in names]
        if unknown:
            raise ValueError(f"quick: experts {unknown} are not in the pool; use names from 'experts:'")
        return self

    @property
    def expert_names(self) -> list[str]:
        return [e.label for e in self.experts]

    def expert(self, name: str) -> Expert:
        for e in self.experts:
            if e.label == name:
                return e
        raise ConfigError(f"pool {self.name!r} has no expert {name!r}{did_you_mean(name, self.expert_names)}")

    def data_for(self, expert) -> Optional[ExpertData]:
        """An expert's data (by name or Expert), the pool default filling the parts it leaves out."""
        e = self.expert(expert) if isinstance(expert, str) else expert
        own = e.data or ExpertData()
        merged = for_expert(own.inherit(self.data), e.label)
        return merged if (merged.text or merged.labelled) else None

    def all_data(self) -> dict:
        return {e.label: self.data_for(e) for e in self.experts}

    @property
    def folder(self) -> Optional[Path]:
        return Path(self.source).parent if self.source else None

    def without(self, names) -> "Pool":
        """The same pool minus some experts (``--exclude``: e.g. an id that cannot be resolved)."""
        for n in names:
            self.expert(n)
        kept = [e for e in self.experts if e.label not in set(names)]
        if not kept:
            raise ConfigError(f"--exclude {','.join(names)} leaves no expert in pool {self.name!r}: keep at least one")
        return self.model_copy(update={"experts": kept})


def list_pools() -> list[str]:
    return list_names("pools")


def load_pool(name_or_path, exclude=()) -> Pool:
    """A shipped pool by name (``qwen3-4b``, ``demo``) or a pool YAML file by path, minus the ``exclude``d experts."""
    path = find_named_file("pools", name_or_path, "pool")
    data = read_yaml(path, "pool")
    if not isinstance(data, dict):
        raise ConfigError(f"pool file {path} must be a mapping with keys name, base, experts")
    data.setdefault("name", path.stem)
    try:
        pool = Pool.model_validate({**data, "source": str(path.resolve())})
    except ValidationError as exc:
        raise ConfigError(f"pool file {path} is invalid:\n{_explain(exc)}") from None
    pool = _quick(pool)
    check_pool_data(pool)
    return pool.without(list(exclude)) if exclude else pool


def _quick(pool: Pool) -> Pool:
    """The pool cut to its ``quick:`` experts when their environment variable is set."""
    if pool.quick is None or not pool.quick.asked():
        return pool
    gone = [e.label for e in pool.experts if e.label not in pool.quick.experts]
    return pool.without(gone).model_copy(update={"description": pool.description + " (quick family)"}) if gone else pool


def check_pool_data(pool: Pool) -> None:
    """Every expert's data sources checked at load time (``expert_data.check.check_sources``): a missing file, field
    or item count, an unknown family data reference or lm-eval task fails here, not at the first merge."""
    from wildmerge.expert_data.check import check_sources

    for name, data in pool.all_data().items():
        try:
            check_sources(name, data, pool.folder)
        except ConfigError as exc:
            raise ConfigError(f"pool {pool.name!r}: {exc}") from None


def _explain(exc: ValidationError) -> str:
    """One line per problem; unknown keys list the valid ones."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            model = (Pool if len(err["loc"]) == 1 else Expert if err["loc"][0] == "experts"
                     else QuickVariant if err["loc"][0] == "quick" else ModelRef)
            valid = [f for f in model.model_fields if f != "source"]
            key = str(err["loc"][-1])
            lines.append(f"  {where}: unknown key{did_you_mean(key, valid)}; valid keys: {', '.join(valid)}")
        else:
            lines.append(f"  {where}: {err['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)
