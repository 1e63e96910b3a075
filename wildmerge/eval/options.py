"""How models are scored: the one typed set of evaluation options, from the command line to the executors.

``wildmerge eval`` and ``wildmerge sample`` build it from their flags (``commands/options.py``), library callers
directly; ``evaluate_run`` / ``evaluate_models`` and the executors take it as it is. Every value is checked once,
when the options are made, and a bad one is a ``ConfigError`` that names its flag; nothing downstream checks again.
The suite overrides are checked by the suite's own rules (``SuiteSettings``), so a value a suite file would refuse
is refused here with the same reason.
"""

from typing import Any, Dict, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator, model_validator

from wildmerge import numbers
from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.eval.suites import SuiteSettings

# the options each executor reads: setting another executor's option is an error, never silently ignored
EXECUTOR_OPTIONS = {"local": ("workers", "job_timeout"), "serial": (),
                    "ray": ("ray_address", "gpus_per_job", "cpus_per_job"),
                    "slurm": ("slurm_partition", "slurm_time", "gpus_per_job", "cpus_per_job", "slurm_mem_gb",
                              "slurm_array_parallelism", "slurm_cluster")}
SUITE_OVERRIDES = ("limit", "dtype", "batch_size", "device")  # replace the suite's settings (and so the job ids)
MESSAGES = {"batch_size": "{flag} must be an integer or auto, got {value!r}"}
# the numbers' rules, shared with the command line's types (commands/options.py): one message for a bad value
NUMBERS = {"screen": numbers.OPEN_FRACTION, "workers": numbers.POSITIVE_INT, "job_timeout": numbers.POSITIVE_FLOAT,
           "gpus_per_job": numbers.NONNEGATIVE_FLOAT, "cpus_per_job": numbers.POSITIVE_FLOAT,
           "slurm_time": numbers.POSITIVE_INT, "slurm_mem_gb": numbers.POSITIVE_INT,
           "slurm_array_parallelism": numbers.POSITIVE_INT}


def flag(name: str) -> str:
    """How a message names an option: its flag (the device's differs: ``eval --device``, ``sample --eval-device``)."""
    return "the evaluation device" if name == "device" else "--" + name.replace("_", "-")


class EvalOptions(BaseModel):
    """Where the jobs run, what is redone or kept, and the suite settings a command overrides. Executor options
    left unset take the executor's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executor: Literal["local", "serial", "ray", "slurm"] = "local"
    retry_failed: bool = False
    record_items: bool = False  # every document's score in the results (screening, the guided search)
    screen: Optional[float] = None  # score this fraction of the items first (``screening/``)
    allow_pickle: bool = False
    limit: Optional[Union[int, float]] = None
    dtype: Optional[str] = None
    batch_size: Optional[Union[int, Literal["auto"]]] = None
    device: Optional[str] = None  # the evaluation device; the suite's when unset
    workers: Optional[int] = None  # local: default one per visible GPU, else one per CPU core (at most four)
    job_timeout: float = 3600.0  # local: seconds one model may take before its worker is replaced
    ray_address: Optional[str] = None  # ray: auto or ray://host:10001 joins a cluster; unset starts a local one
    gpus_per_job: Optional[float] = None  # ray, slurm: default 1 where GPUs exist
    cpus_per_job: Optional[float] = None  # default: Ray 1, Slurm 4
    slurm_partition: Optional[str] = None
    slurm_time: int = 240  # minutes per job
    slurm_mem_gb: Optional[int] = None
    slurm_array_parallelism: int = 64
    slurm_cluster: Optional[str] = None  # 'local' / 'debug': submitit's stand-ins, for tests
    # lm-eval's Weights & Biases logger (its ``wandb_args``: wandb.init's arguments, e.g. project, entity, group):
    # every scored job is one W&B run with the run's manifest as its config (``wandb_log.py``); no effect on job ids
    wandb_args: Optional[Dict[str, str]] = None

    def __init__(self, **values: Any):
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(_message(exc, values)) from None

    @field_validator(*NUMBERS, mode="before")
    @classmethod
    def _by_the_number_rules(cls, value, info: ValidationInfo):
        if value is not None and NUMBERS[info.field_name].problem(value):
            raise ValueError(NUMBERS[info.field_name].problem(value))
        return value

    @field_validator(*SUITE_OVERRIDES, mode="before")
    @classmethod
    def _by_the_suite_rules(cls, value, info: ValidationInfo):
        if value is None:
            return None
        try:
            return getattr(SuiteSettings.model_validate({info.field_name: value}), info.field_name)
        except ValidationError as exc:
            raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None

    @field_validator("wandb_args", mode="before")
    @classmethod
    def _key_values(cls, value):
        """``project=merging,group=qwen3`` (lm-eval's own form, commas between pairs) or a mapping."""
        if not isinstance(value, str):
            return value
        pairs = [p.strip() for p in value.split(",") if p.strip()]
        bad = [p for p in pairs if "=" not in p or not p.split("=", 1)[0].strip()]
        if bad or not pairs:
            raise ValueError(f"expected key=value pairs separated by commas (project=NAME,entity=TEAM), got {value!r}")
        split = [(k.strip(), v.strip()) for k, v in (p.split("=", 1) for p in pairs)]
        keys = [k for k, _ in split]
        empty = [k for k, v in split if not v]
        if empty:
            raise ValueError(f"{empty[0]}= has no value: give {empty[0]}=VALUE, or leave {empty[0]} out")
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"{twice[0]} is given twice: give each key once")
        from wildmerge.eval.wandb_log import init_keys

        known = init_keys()
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not an argument of wandb.init{did_you_mean(unknown[0], known)} "
                             f"(it takes {', '.join(known)})")
        return dict(split)

    @model_validator(mode="after")
    def _options_of_this_executor(self) -> "EvalOptions":
        own = EXECUTOR_OPTIONS[self.executor]
        for name in sorted(self.model_fields_set):
            if name not in own and any(name in names for names in EXECUTOR_OPTIONS.values()) \
                    and getattr(self, name) is not None:
                valid = ", ".join(map(flag, own)) or "none"
                raise ValueError(f"{flag(name)} does not apply to the {self.executor} executor (its options: {valid})")
        return self

    def suite_overrides(self) -> Dict[str, Any]:
        """The suite settings this evaluation replaces (they change the job ids)."""
        return {k: getattr(self, k) for k in SUITE_OVERRIDES if getattr(self, k) is not None}


def _message(exc: ValidationError, values: dict) -> str:
    """One line for the first bad value, naming its flag."""
    error = exc.errors()[0]
    msg = error["msg"].removeprefix("Value error, ")
    if not error["loc"]:  # a rule over several options
        return msg
    name = str(error["loc"][0])
    if name in NUMBERS:
        return f"{flag(name)}: {msg}"
    if error["type"] == "extra_forbidden":
        return f"unknown evaluation option {name!r}{did_you_mean(name, EvalOptions.model_fields)}"
    if msg.startswith(f"{name} "):  # the suite's rules name the setting: "limit 1.5 must be ..."
        return flag(name) + msg[len(name):]
    template = MESSAGES.get(name, "{flag} {value!r}: {msg}")
    return template.format(flag=flag(name), value=values.get(name), msg=msg[:1].lower() + msg[1:])
