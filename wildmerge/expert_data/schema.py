"""The ``data:`` of a pool expert (``calibration:`` is the old name): where its own inputs come from.

An expert's data has an unlabelled ``text`` part (RegMean, Chain of Merges, the task alignment score, the activation
metrics, the composer's centroids) and an optional ``labelled`` part (prompt / answer: the gradient metrics). Each
part is one source::

    data: generate                                   # text sampled from the expert itself (shorthand for text:)
    data: data/math.jsonl                            # a local jsonl / json / txt / parquet file
    data:
      text: {dataset: openai/gsm8k, revision: <commit>, subset: main, split: train, template: "{question} {answer}"}
      labelled: {lm_eval_task: gsm8k, split: train}   # prompt and answer as lm-eval writes them
    data: {text: "demo:unlabelled/expert_01", labelled: "demo:calibration/expert_01"}
    data: {text: generate, labelled: generate}       # labelled: the expert's own text, its second half the answer

A pool-level ``data:`` is every expert's default, part by part; ``{name}`` in a file path is the expert's name.
"""

from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.expert_data.generate import GenerateSpec

KINDS = ("file", "demo", "dataset", "lm_eval_task", "generate")
FILE_SUFFIXES = (".jsonl", ".json", ".txt", ".parquet")
# the old recipe-style keys (plugins/layerwise/calibration.py) that a ``calibration:`` entry may still carry
FAMILY_PREFIXES = ("demo:", "smollm2:")  # the locally built families (wildmerge.families), as hub.py knows them
FAMILY_DATA = ("demo:unlabelled/", "demo:calibration/", "smollm2:text/", "smollm2:labelled/")  # + an expert's name

LEGACY = {"data": None, "text_field": "field", "n_samples": "n", "prompt_field": "prompt", "answer_field": "answer"}


class Source(BaseModel):
    """One source of items; exactly one of ``file``, ``demo``, ``dataset``, ``lm_eval_task``, ``generate``."""

    model_config = ConfigDict(extra="forbid")

    file: Optional[str] = None  # local .jsonl / .json / .txt / .parquet (relative to the pool file)
    demo: Optional[str] = None  # a built family's own data: demo:unlabelled/<e>, demo:calibration/<e>, smollm2:text/<e>
    dataset: Optional[str] = None  # a hub dataset id, read through datasets.load_dataset (offline: its local cache)
    lm_eval_task: Optional[str] = None  # labelled items: an lm-eval task's documents, as lm-eval formats them
    generate: Optional[GenerateSpec] = None  # text sampled from the expert, seeded, cached
    tasks: Optional[str] = None  # lm_eval_task: a folder of task YAMLs beyond lm-eval's own (or demo:tasks)
    revision: Optional[str] = None  # dataset: the commit to read (pin it: a branch moves)
    subset: Optional[str] = None  # dataset: its configuration name
    split: str = "train"
    field: Optional[str] = None  # text: the record field (default "text")
    template: Optional[str] = None  # text: "{question} {answer}" formatted with each record
    prompt: Optional[str] = None  # labelled: a field name or a template (default "prompt")
    answer: Optional[str] = None  # labelled: a field name or a template (default "answer")
    n: Optional[int] = Field(None, ge=1)  # at least this many items, checked when the pool is loaded
    # how the layer-wise methods use the text (copied into a recipe's calibration section)
    seq_len: Optional[int] = Field(None, ge=2)
    min_tokens: Optional[int] = Field(None, ge=1)
    batch_size: Optional[int] = Field(None, ge=1)
    seed: Optional[int] = None

    @model_validator(mode="after")
    def _one_kind(self):
        given = [k for k in KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(KINDS)} (got {', '.join(given) or 'none'})")
        if self.file is not None and not self.file.endswith(FILE_SUFFIXES):
            raise ValueError(f"file {self.file!r} must end in one of {', '.join(FILE_SUFFIXES)}")
        if self.demo is not None and not self.demo.startswith(FAMILY_PREFIXES):
            raise ValueError(f"demo {self.demo!r} must start with one of {', '.join(FAMILY_PREFIXES)}")
        if self.demo is not None and not (self.demo.startswith(FAMILY_DATA) and self.demo.split("/", 1)[1]):
            # said when the pool is loaded, not at the first merge that reads it
            raise ValueError(f"{self.demo!r} is not a family's data: write one of "
                             f"{', '.join(f + '<expert>' for f in FAMILY_DATA)} (e.g. demo:unlabelled/{{name}})"
                             f"{did_you_mean(self.demo.split('/', 1)[0] + '/', FAMILY_DATA)}")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) is not None)

    def describe(self) -> str:
        """One short line for logs, model cards and error messages."""
        if self.kind == "generate":
            return "generate"
        where = getattr(self, self.kind)
        if self.kind == "dataset":
            where += f"@{self.revision or 'unpinned'}" + (f"/{self.subset}" if self.subset else "") + f":{self.split}"
        if self.kind == "lm_eval_task":
            where = f"lm-eval task {where}:{self.split}"
        return where


class ExpertData(BaseModel):
    """An expert's two parts; either may be missing."""

    model_config = ConfigDict(extra="forbid")

    text: Optional[Source] = None
    labelled: Optional[Source] = None

    def inherit(self, default: Optional["ExpertData"]) -> "ExpertData":
        """This expert's parts, the pool default's where it has none."""
        if default is None:
            return self
        return ExpertData(text=self.text or default.text, labelled=self.labelled or default.labelled)


def parse_source(value, where: str) -> Source:
    """A source from its shorthand (``generate``, ``demo:...``, a file path) or its mapping (old keys accepted)."""
    if isinstance(value, str):
        if value == "generate":
            value = {"generate": {}}
        elif value.startswith(FAMILY_PREFIXES):  # a locally built family's own data (demo:, smollm2:)
            value = {"demo": value}
        else:
            value = {"file": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: a data source is a string or a mapping, got {value!r}")
    value = dict(value)
    if "generate" in value and value["generate"] is None:
        value["generate"] = {}
    if "data" in value:  # the old recipe-style {data: ..., text_field: ...}
        old = value.pop("data")
        if not isinstance(old, str):
            raise ConfigError(f"{where}: 'data' must be a string")
        looks_local = old.endswith(FILE_SUFFIXES) or old.startswith((".", "/", "~"))
        if old == "generate" or old.startswith(FAMILY_PREFIXES) or (looks_local and not Path(old).expanduser().is_dir()):
            kind = parse_source(old, where).kind
        else:
            kind = "dataset"  # a hub id, or a dataset folder datasets.load_dataset reads
        value[kind] = {} if kind == "generate" else old
    for old, new in LEGACY.items():
        if new and old in value:
            value[new] = value.pop(old)
    try:
        return Source.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(map(str, first["loc"]))
        if first["type"] == "extra_forbidden":
            fields = GenerateSpec.model_fields if first["loc"][0] == "generate" else Source.model_fields
            key = str(first["loc"][-1])
            raise ConfigError(f"{where}: unknown key {loc!r}{did_you_mean(key, fields)}; valid keys: "
                              f"{', '.join(fields)}") from None
        raise ConfigError(f"{where}: {loc + ': ' if loc else ''}{first['msg'].removeprefix('Value error, ')}") from None


def parse_data(value, where: str) -> Optional[ExpertData]:
    """``data:`` (or ``calibration:``) as written in a pool file: a source (the text part) or {text, labelled}."""
    if value is None:
        return None
    if isinstance(value, ExpertData):
        return value
    if isinstance(value, dict) and value and set(value) <= {"text", "labelled"}:
        return ExpertData(text=parse_source(value["text"], f"{where}.text") if value.get("text") is not None else None,
                          labelled=(parse_source(value["labelled"], f"{where}.labelled")
                                    if value.get("labelled") is not None else None))
    return ExpertData(text=parse_source(value, where))


def for_expert(data: Optional[ExpertData], name: str) -> Optional[ExpertData]:
    """The pool default's ``{name}`` placeholders filled in for one expert."""
    if data is None:
        return None

    def fill(s: Optional[Source]) -> Optional[Source]:
        if s is None:
            return None
        update = {k: getattr(s, k).replace("{name}", name) for k in ("file", "demo") if getattr(s, k)}
        return s.model_copy(update=update)

    return ExpertData(text=fill(data.text), labelled=fill(data.labelled))
