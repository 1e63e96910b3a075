"""The CPU rates of the cost plan measured on this machine, once per host: a dry run prices the work where it runs.

The built-in CPU rates (``cost.DEFAULTS["cpu"]``) were measured on another machine, and machines differ: the demo
job planned at 59 s took 120 s on a slower host. So, unless the user gives an earlier run (``--calibrate-from``), the
first CPU dry run on a host measures a few seconds of the work the rates stand for, in a fresh Python process (it
imports what a run imports, and torch stays out of the dry run's own process), and fits the same ``Calibration``
fields; the record is cached per host (CPU model, usable cores, torch version, ``VERSION``) and later dry runs read
it. Everything is timed in CPU seconds (``time.process_time``) on one thread, the merges and forward passes the best
of a few repeats: what a quiet core does, so a machine busy at the moment of measuring measures about as a quiet one
would (the defaults were measured quiet too).

What is measured and how it becomes a rate:

- **Merges** (``merge_start_s``, ``merge_s_per_gparam_read``): real task-arithmetic merges of a base and three
  experts (random float32 Llama checkpoints on disk, at two sizes) through the sampler's path: mergekit's
  ``run_merge`` inside ``wildmerge_checks`` into an atomic folder. Start and rate are the line through the two
  sizes (``cost.fit_merges``), as the defaults solve TA's anchor and the demo job's merges (on one thread where the
  runner uses every core: a larger model's merges may go faster than planned).
- **Evaluations** (``eval_s_per_tparam_token``): forward passes and log-softmax of a Llama of the demo family's shape
  at the demo suite's batch, one thread: seconds per parameter-token of one core. The rate is an evaluation
  worker's throughput (one one-thread worker per core): that time / the default workers, x ``EVAL_PER_FORWARD``,
  what lm-eval's whole job (reading, requests, its Python) costs per counted token over the bare forward passes,
  fixed from the default: the default's rate over this micro-work's on the kind of machine the defaults come from.
- **The run's start** (``run_start_s``): importing torch and mergekit in the fresh process, the bulk of a run's own
  start (the command's and each evaluation worker's imports), x ``RUN_START_PER_IMPORT``, fixed the same way.

``WILDMERGE_HOST_RATES``: ``measure`` (the default) or ``defaults`` (the built-in rates: tests, CI, a plan to compare
with another machine's); ``WILDMERGE_HOST_RATES_CACHE``: the cache folder (default ``~/.cache/wildmerge/host_rates``).
A cache file that does not read is measured again.
"""

import hashlib
import json
import math
import os
import platform
import socket
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import List, Optional, Tuple

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from wildmerge.errors import WildmergeError
from wildmerge.planning import cost

VERSION = 1  # of what is measured and how: a change makes every host measure again
ENV, CACHE_ENV = "WILDMERGE_HOST_RATES", "WILDMERGE_HOST_RATES_CACHE"
CHOICES = ("measure", "defaults")

# The micro-work's shapes. Merges: a base and three experts, (hidden, layers, intermediate, vocab); the large one
# reads 4 x 15.7M parameters (~0.17 s at the default rate), the small one 4 x 0.07M (its start).
MERGE_SIZES = ((64, 2, 128, 256), (512, 4, 1536, 4096))
MERGE_EXPERTS, REPEATS = 3, 2
# Evaluations: the demo family's shape (1.72M parameters as a Llama), the demo suite's batch of 32, 48 tokens a row.
FORWARD_SHAPE, FORWARD_BATCH, FORWARD_TOKENS, FORWARD_REPEATS = (192, 4, 512, 512), 32, 48, 5

# The micro-work on the project's development machine, the kind the defaults were measured on (AMD EPYC, 2 vCPUs;
# hosts of that kind differ by up to 1.5x, benchmarks/HISTORY.md): CPU seconds, median of 6 runs of this
# module while other work kept the load average at 7-10 (the forward passes 39-60, the imports 7.1-8.9). The default rates over them carry what the micro-work leaves out: lm-eval's own work (reading
# the model, building requests, its Python) and how the plan counts tokens (an evaluation job costs 0.57 x the
# counted tokens' bare forward passes), the run's work beyond the imports (the pool, the pre-flight scan, the
# workers' start, the report). A host is assumed to differ in those as in the micro-work.
REFERENCE_FORWARD_S_PER_TPARAM_TOKEN = 44.7
REFERENCE_IMPORT_S = 7.9
REFERENCE_WORKERS = 2  # the defaults' evaluation workers, one per core
EVAL_PER_FORWARD = (cost.DEFAULTS["cpu"].eval_s_per_tparam_token * REFERENCE_WORKERS
                    / REFERENCE_FORWARD_S_PER_TPARAM_TOKEN)  # 0.573
RUN_START_PER_IMPORT = cost.DEFAULTS["cpu"].run_start_s / REFERENCE_IMPORT_S  # 2.28
# Anchored on the real job: `python sample_and_merge.py` on the published demo family, on 2 quiet cores of that kind
# of machine (3 runs, load 0.7; merges on one thread each since merged bytes no longer follow the threads), took
# 117 s (102-118): merges 20.0 s, evaluations 70 s, the rest 27 s; with the ratios above alone, this host's
# micro-work planned merges 9 s, evaluations 38 s, the rest 18 s. These carry the difference, so the plan is the
# measured job on the anchor's host and scales with the micro-work elsewhere.
ANCHOR_MERGES, ANCHOR_EVALUATIONS, ANCHOR_REST = 20.0 / 9.0, 70.0 / 38.0, 27.0 / 18.0


class MeasureError(WildmergeError):
    """The measuring process failed: the dry run says so and plans at the built-in rates."""


def _positive(value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"expected a positive finite number of seconds, got {value!r}")
    return value


class Measured(BaseModel):
    """One host's micro-work, as the measuring process reports it and the cache keeps it."""

    model_config = ConfigDict(extra="forbid")

    version: int
    host: Optional[dict] = None  # the facts the cache is keyed by, and the host's name (the parent adds them)
    measured: Optional[str] = None  # UTC date and time
    import_s: float  # CPU seconds: import torch and mergekit.merge
    merges: List[Tuple[float, float]]  # (G parameters read, CPU seconds) of task-arithmetic merges, best of repeats
    forward_s_per_tparam_token: float  # CPU seconds of one thread per 1e12 parameter-tokens
    wall_s: float = 0.0  # what the measuring took, imports included

    @field_validator("import_s", "forward_s_per_tparam_token")
    @classmethod
    def _seconds(cls, v):
        return _positive(v)

    @field_validator("merges")
    @classmethod
    def _merges(cls, v):
        if len({g for g, _ in v}) < 2:
            raise ValueError("expected merges of at least two sizes")
        for g, s in v:
            _positive(g), _positive(s)
        return v


def mode() -> str:
    """``WILDMERGE_HOST_RATES``, checked: ``measure`` when unset."""
    value = os.environ.get(ENV, "").strip().lower() or "measure"
    if value not in CHOICES:
        raise WildmergeError(f"{ENV}={os.environ[ENV]!r}: expected one of {', '.join(CHOICES)} (measure: this "
                             f"machine's CPU rates, measured once and cached; defaults: the built-in ones)")
    return value


def cache_dir() -> Path:
    """``$WILDMERGE_HOST_RATES_CACHE`` or ``~/.cache/wildmerge/host_rates``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "wildmerge" / "host_rates"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_facts() -> dict:
    """What the rates depend on, and so what the cache is keyed by: torch's version read without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    from wildmerge.resources import usable_cores

    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "none"
    return {"cpu": cpu_model(), "cores": usable_cores(), "torch": torch, "version": VERSION}


def cache_file(facts: Optional[dict] = None) -> Path:
    facts = facts or host_facts()
    key = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"{key}.json"


def read_cached(path: Path) -> Optional[Measured]:
    """The cached record, None when absent or damaged (then measured again)."""
    try:
        record = Measured.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError):
        return None
    return record if record.version == VERSION else None


def measured() -> Tuple[Measured, Path]:
    """This host's record and its cache file: read from the cache, else measured now (a few seconds) and cached."""
    from wildmerge.atomic import write_text

    facts = host_facts()
    path = cache_file(facts)
    record = read_cached(path)
    if record is None:
        print(f"  measuring this machine's CPU rates for the cost plan (once per host; cached in {path}) ...",
              flush=True)
        record = _measure_in_child().model_copy(update={
            "host": {**facts, "name": socket.gethostname()},
            "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")})
        try:
            write_text(path, record.model_dump_json(indent=2) + "\n")
        except (OSError, WildmergeError) as exc:  # a read-only home: the plan still gets this host's rates
            print(f"  note: could not cache this machine's CPU rates ({exc}); set {CACHE_ENV} to a writable folder")
    return record, path


def calibration(record: Measured, workers: int, path=None) -> cost.Calibration:
    """The ``Calibration`` of one host's record (module docstring); ``workers``: the default evaluation workers here
    (their throughput is the rate)."""
    default = cost.DEFAULTS["cpu"]
    start, rates = cost.fit_merges([("ta", g, s) for g, s in record.merges], default.merge_start_s)
    rate = rates["ta"]
    if rate <= 0:  # the larger merge took no longer than the smaller: noise; the rate through no start instead
        g, s = max(record.merges)
        start, rate = 0.0, s / g
    where = f"cached {path}, " if path else ""
    return replace(default, merge_start_s=ANCHOR_MERGES * start, merge_s_per_gparam_read=ANCHOR_MERGES * rate,
                   eval_s_per_tparam_token=(ANCHOR_EVALUATIONS * EVAL_PER_FORWARD * record.forward_s_per_tparam_token
                                            / max(1, workers)),
                   run_start_s=ANCHOR_REST * RUN_START_PER_IMPORT * record.import_s,
                   source=f"measured on this host ({where}{record.measured})")


def host_calibration(workers: int) -> Optional[cost.Calibration]:
    """This host's CPU ``Calibration`` (measured once, then cached); None with ``WILDMERGE_HOST_RATES=defaults``."""
    if mode() == "defaults":
        return None
    record, path = measured()
    return calibration(record, workers, path)


def _measure_in_child() -> Measured:
    """Run the measurement in a fresh Python process (``python -m wildmerge.planning.host_rates OUT``) tied to this
    one (``lifeline``); a failure is a ``MeasureError`` in one line with the end of its output."""
    from wildmerge import lifeline

    with tempfile.TemporaryDirectory(prefix="wildmerge-host-rates-") as tmp:
        out, log, rc = Path(tmp) / "measured.json", Path(tmp) / "log.txt", None
        try:
            with open(log, "w") as f:
                rc = lifeline.run([sys.executable, "-m", "wildmerge.planning.host_rates", str(out)], stdout=f,
                                  stderr=f, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
            return Measured.model_validate_json(out.read_text())
        except (OSError, ValueError, ValidationError) as exc:
            why = f"exit code {rc}" if rc else " ".join(str(exc).split())[:300]
            said = " ".join(log.read_text().split())[-300:] if log.is_file() else ""
            raise MeasureError(f"measuring this machine's CPU rates failed ({why}; its output: {said or 'none'}); "
                               f"set {ENV}=defaults to skip it") from None


# --- the measuring process ---------------------------------------------------------------------------------------


def _cpu(fn, repeats: int) -> float:
    """The least CPU seconds of ``repeats`` calls of ``fn``."""
    best = math.inf
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def _llama_config(hidden: int, layers: int, intermediate: int, vocab: int):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=intermediate, vocab_size=vocab,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       tie_word_embeddings=True, dtype="float32", architectures=["LlamaForCausalLM"])


def _write_family(root: Path, shape) -> Tuple[List[Path], int]:
    """A base and ``MERGE_EXPERTS`` experts (the base plus noise) of a random Llama: their folders, the parameters."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    config = _llama_config(*shape)
    with torch.device("meta"):
        names = {k: v.shape for k, v in LlamaForCausalLM(config).state_dict().items() if k != "lm_head.weight"}
    gen = torch.Generator().manual_seed(0)
    base = {k: torch.randn(s, generator=gen) * 0.02 for k, s in names.items()}
    folders = []
    for i in range(MERGE_EXPERTS + 1):
        folder = root / f"{'x'.join(map(str, shape))}_{i}"
        folder.mkdir()
        config.to_json_file(folder / "config.json")
        tensors = base if i == 0 else {k: v + torch.randn(v.shape, generator=gen) * 1e-3 for k, v in base.items()}
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        folders.append(folder)
    _write_tokenizer(folders[0])  # the runner copies the base's tokenizer into every merge
    return folders, sum(math.prod(s) for s in names.values())


def _write_tokenizer(folder: Path) -> None:
    """A two-word tokenizer: what mergekit copies (``copy_tokenizer``) costs the same whatever its vocabulary."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    Tokenizer(WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))


def _merge(folders: List[Path], out: Path) -> None:
    """One task-arithmetic merge as the sampler's runner makes it (``merging/runner.merge_one``)."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    from wildmerge.atomic import atomic_dir
    from wildmerge.plugins.entrypoint import wildmerge_checks

    recipe = {"merge_method": "task_arithmetic", "base_model": str(folders[0]), "dtype": "float32",
              "models": [{"model": str(f), "parameters": {"weight": 1.0 / (len(folders) - 1)}} for f in folders[1:]]}
    options = MergeOptions(copy_tokenizer=True, device="cpu", random_seed=0, quiet=True, trust_remote_code=False,
                           allow_crimes=False)
    with wildmerge_checks(strict_params=True), atomic_dir(out) as tmp:
        run_merge(MergeConfiguration.model_validate(recipe), str(tmp), options=options)


def _forward_rate() -> float:
    """CPU seconds of one thread per 1e12 parameter-tokens: forward passes and log-softmax, as lm-eval scores."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(_llama_config(*FORWARD_SHAPE)).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, FORWARD_SHAPE[3], (FORWARD_BATCH, FORWARD_TOKENS))
    with torch.inference_mode():
        model(ids)  # the first call allocates
        seconds = _cpu(lambda: model(ids).logits.log_softmax(-1), FORWARD_REPEATS)
    return seconds * 1e12 / (params * FORWARD_BATCH * FORWARD_TOKENS)


def child_main(out: str) -> int:
    began, cpu0 = time.perf_counter(), time.process_time()
    import torch  # noqa: F401  (the imports are measured: the bulk of a run's own start)
    import mergekit.merge  # noqa: F401

    from wildmerge.threads import torch_threads

    import_s = time.process_time() - cpu0
    with torch_threads(1):
        merges, forward = _merge_rates(), _forward_rate()
    record = Measured(version=VERSION, import_s=import_s, merges=merges, forward_s_per_tparam_token=forward,
                      wall_s=time.perf_counter() - began)
    Path(out).write_text(record.model_dump_json())
    return 0


def _merge_rates() -> list:
    """(billions of parameters read, CPU seconds) of a merge at each of ``MERGE_SIZES``."""
    merges = []
    with tempfile.TemporaryDirectory(prefix="wildmerge-host-rates-") as tmp:
        root = Path(tmp)
        for i, shape in enumerate(MERGE_SIZES):
            folders, params = _write_family(root, shape)
            if i == 0:
                _merge(folders, root / "warm")  # the first merge pays mergekit's first-call costs, once a run
            n = iter(range(REPEATS))
            merges.append((params * len(folders) / 1e9,
                           _cpu(lambda: _merge(folders, root / f"out{next(n)}"), REPEATS)))
    return merges


if __name__ == "__main__":
    from wildmerge import lifeline

    lifeline.hold()  # first: dies with the dry run that started it
    sys.exit(child_main(sys.argv[1]))
