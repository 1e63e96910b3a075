"""What a study will cost before it runs: merges, evaluations, disk and wall time per executor (``--dry-run``).

One linear model, scaled by parameters and tokens. A merge costs a start (mergekit's task graph, the checks, writing
the output: seconds per merge, per device) plus ``seconds per parameter read`` x parameters x the models it reads x
its method's factor (``METHOD_FACTORS``: one table per device, each factor with where it was measured, from the
method recipes' ``cost:``; a method not in it counts 1, as task arithmetic, and the dry run names it). A method that
reads data (``DATA_PASSES``, also from its recipe: RegMean, CoM, Fisher, MaTS, ...) adds its forward passes over
each expert's calibration texts at the evaluation's rate per parameter-token. An evaluation costs a fixed start
(load the model, build the tasks) plus ``seconds per parameter-token`` x parameters x the tokens its items score. The rates come from a calibration: the user's own
earlier run (``--calibrate-from RUN``: its merge records, a start and a rate per method, and its result records),
on a CPU this machine's own, measured once per host (``host_rates.py``), or the defaults below. The arithmetic is
here, in small functions; ``dryrun.py`` and ``search/plan.py`` print it.
"""

import functools
import json
import math
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

GB, HOUR = 1e9, 3600.0

# A task's size (items lm-eval scores, tokens each one scores) is its suite's fact (``items`` and ``tokens_per_item`` in
# ``merge_recipes/suites/<name>.yml``); the caller reads the suite and hands the sizes down (``Scoring.sizes``,
# ``calibrate_from``'s ``sizes``). A task whose size no suite declares counts DEFAULT_ITEMS x DEFAULT_TOKENS (the
# SmolLM2 family's tasks, counted: 100 items of 59-157 tokens, 103 on average).
DEFAULT_ITEMS, DEFAULT_TOKENS = 100, 100


@dataclass(frozen=True)
class Calibration:
    """Per-unit costs on one kind of device, and where they came from."""

    device: str  # cpu or cuda
    merge_s_per_gparam_read: float  # TA's merge seconds per 1e9 parameters read (every input, base included)
    eval_start_s: float  # per evaluated model: load it, build the tasks
    eval_s_per_tparam_token: float  # evaluation and calibration forward passes: seconds per 1e12 parameter-tokens
    source: str
    error: float  # the estimate is good to about this factor either way
    merge_start_s: float = 0.0  # per merge, whatever its size
    run_start_s: float = 0.0  # per run: the command's start, the evaluation worker's start, the report
    method_rates: Tuple[Tuple[str, float], ...] = ()  # (method, seconds per G read, data included) fitted from a run
    eval_dtype: str = "float32"  # the weights' dtype the evaluation rate was measured at


@dataclass(frozen=True)
class Factor:
    """A method's merge seconds per parameter read as a multiple of task arithmetic's, and where it was measured."""

    value: float
    source: str


# Each method's factors (one per device: methods not listed count 1, priced as task arithmetic, and the dry run
# names them) are the method recipe's ``cost: factors`` (``merge_recipes/methods/<name>.yml``), each with where it
# was measured. The factors are ratios of whole merges, applied to the read only (at the anchor's size the start is
# 16% of TA's).


# An evaluation's rate per parameter-token at other weights' dtypes, as a multiple of float32's, per device (a dtype
# not listed counts 1). Measured as CPU-seconds, so they hold whatever the number of workers.
_SMOL_BF16 = ("benchmarks/results/eval_smollm2_bf16_workers_cpu2.txt: the smollm2_bf16 suite (bfloat16, float32 "
              "log-softmax, batch 64) against smollm2 (float32, batch 16), SmolLM2 base and arithmetic expert, "
              "50 items per task, 3 quiet pairs: CPU-seconds 0.52x [0.51, 0.56]")
EVAL_DTYPE_FACTORS: Dict[str, Dict[str, Factor]] = {"cpu": {"bfloat16": Factor(0.52, _SMOL_BF16)}}


@dataclass(frozen=True)
class DataPasses:
    """A method that reads data: forward-pass equivalents per calibration text of each expert (a backward pass
    counts 2), at the recipe's defaults, and texts per expert when the merge does not set ``n_samples``."""

    passes: float
    texts: int
    source: str


# A method that reads data states its passes under ``cost: data_passes`` in its recipe. Assumed: these passes
# dominate such a merge (its per-layer solves are small against them) and run at the evaluation's rate per
# parameter-token; the read is priced as task arithmetic's on top.


@functools.cache
def _method_tables() -> tuple:
    """(METHOD_FACTORS {device: {method: Factor}}, DATA_PASSES {method: DataPasses}) from the method recipes."""
    from wildmerge.recipes.method import method_costs

    factors: Dict[str, Dict[str, Factor]] = {"cpu": {}, "cuda": {}}
    passes: Dict[str, DataPasses] = {}
    for method, c in method_costs().items():
        for device, f in c.factors.items():
            factors[device][method] = Factor(f.value, f.source)
        if c.data_passes is not None:
            passes[method] = DataPasses(c.data_passes.passes, c.data_passes.texts, c.data_passes.source)
    return factors, passes


def __getattr__(name: str):
    """``METHOD_FACTORS`` and ``DATA_PASSES``, read from the method recipes on first use."""
    if name == "METHOD_FACTORS":
        return _method_tables()[0]
    if name == "DATA_PASSES":
        return _method_tables()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TEXT_TOKENS = 256  # calibration texts in the wild: the layer-wise methods' cap, min(256, the model's positions)
FAMILY_TEXT_TOKENS = 20  # the embedded families' texts, measured: SmolLM2 quick family facts 17.8, arithmetic 19.3


# Defaults. cpu, measured on 2 quiet CPU cores of this project's machine, with the default evaluation workers (one
# per core). Merges: the start and TA's rate solve two measurements, TA's merge of the 55.7M anchor (12 experts and
# the base: 0.724 G parameters read) in 2.12 s (benchmarks/HISTORY.md) and the demo main job's 35 merges in 10.2 s
# (7 methods x 29 models read of 1.82M parameters, 0.0528 G each, x the factors above: 1.77 G TA-equivalent;
# benchmarks/results/eval_workers_demo_main_job_cpu2.txt): start + 0.724 rate = 2.12, 35 start + 1.77 rate =
# 10.2, so 0.16 s per merge and 2.71 s per G parameters read. Evaluations, as the machine's throughput per model:
# the SmolLM2 main job (benchmarks/results/smollm2_main_job_cpu2.txt) scored its 31 models (134.5M
# parameters, 9 tasks x 50 items x 100 tokens: 6.05 T parameter-tokens) in 1,257 s of two workers' wall time, 40.5 s
# a model in bfloat16, 77.9 s in float32 at the bfloat16 factor below: less the model's read, 12.8 s per T
# parameter-tokens with no start; the demo job's 48 (1.82M parameters, 0.0494 T at its tasks' counted tokens) took
# 28.8 s, 0.60 s a model, and are planned at 0.64 s. A run's own start (the command, the pool, the pre-flight scan,
# the workers' start, the report): 18 s in the demo job (57.3 s less 10.2 s of merges and 28.8 s of evaluation);
# the SmolLM2 job's was 55 s (its pre-flight scan and report read 31 models of 538 MB).
# cuda, merges measured: mergekit's task_arithmetic of 12 experts of a 142.9M-parameter Qwen3 (Qwen3-4B's layer
# shapes, bf16 on disk, page cache warm) took 3.58 s (median of 5) on one H100 with --cuda (1.86 G parameters read;
# benchmarks/results/spectral_gpu_h100.md); the demo main job's 35 merges took 10.3 s on one H200
# (0.399 G TA-equivalent at the cuda factors): 0.27 s per merge and 1.78 s per G parameters read (two GPUs of one
# generation: an assumption). Evaluations measured on one H200 (benchmarks/results/gpu_main_job_h200_plan.md): the
# demo main job's fastest job took 0.70 s on the long-lived worker (the start); a Qwen3 with Qwen3-4B's configuration
# (4.02 B parameters, bf16) scored the demo suite in 9.98 s, which at that start and the read gives 0.0088 s per T
# parameter-tokens: the 0.01 assumed before (lm-eval's HF backend at ~20% of 990 TFLOP/s, 2 FLOP per
# parameter-token) is kept, the job's plan is then 10.3 s (1.03x the measurement). A run's own start (the command, the
# worker's start with CUDA, the report): 50 s on the H200 (its demo job took 107 s, of which merges 10.2 s and jobs
# 47.3 s). `--calibrate-from RUN` replaces the rates with the user's own run.
DEFAULTS = {
    "cpu": Calibration("cpu", 2.71, 0.0, 12.8,
                       "built-in defaults (measured on 2 quiet cores of the project's development machine: TA's "
                       "55.7M merge, the demo and SmolLM2 main jobs, one evaluation worker per core; cost.py)", 2.0,
                       merge_start_s=0.16, run_start_s=18.0),
    "cuda": Calibration("cuda", 1.78, 0.70, 0.01,
                        "built-in defaults (measured on one H100: merges, mergekit task arithmetic, K = 12; and on "
                        "one H200: the demo job's merges and evaluations, a 4B model on the demo suite)", 3.0,
                        merge_start_s=0.27, run_start_s=50.0),
}


def parameters_from_config(config: dict) -> int:
    """Parameters of a decoder-only transformer from its config.json (Llama / Qwen / Mistral layout): attention,
    gated MLP, norms, embeddings (and the output head unless tied)."""
    c = config.get("text_config") or config
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or h // heads
    attention = 2 * h * heads * head_dim + 2 * h * kv * head_dim
    qk_norm = 2 * head_dim if c.get("model_type", "").startswith("qwen3") else 0
    layer = attention + 3 * h * c["intermediate_size"] + 2 * h + qk_norm
    embeddings = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
    return layers * layer + embeddings + h


Sizes = Mapping[str, Tuple[int, int]]  # task -> (items, tokens per item), as the suites declare them


def suite_tokens(tasks: Iterable[str], limit=None, sizes: Optional[Sizes] = None) -> Dict[str, tuple]:
    """Task -> (items, tokens) one model scores; ``limit``: the suite's items per task (a number or a fraction);
    ``sizes``: the suites' declared sizes (a task not in them counts DEFAULT_ITEMS x DEFAULT_TOKENS)."""
    out = {}
    for task in tasks:
        items, per_item = (sizes or {}).get(task, (DEFAULT_ITEMS, DEFAULT_TOKENS))
        if limit is not None:
            items = min(items, int(limit)) if limit >= 1 else math.ceil(items * limit)
        out[task] = (items, items * per_item)
    return out


def read_seconds(parameters: int, models: float, cal: Calibration) -> float:
    """Reading ``models`` models at task arithmetic's rate: the unit every merge factor multiplies."""
    return cal.merge_s_per_gparam_read * parameters * models / GB


def factor(method: Optional[str], device: str) -> Optional[Factor]:
    """The method's measured factor on ``device``; None when the table has none (it is then counted as 1)."""
    return _method_tables()[0].get(device, {}).get(method)


def data_seconds(method: Optional[str], parameters: int, experts: int, cal: Calibration, texts: Optional[int] = None,
                 text_tokens: int = TEXT_TOKENS) -> float:
    """A data-based method's forward passes over each expert's texts (``texts``: the merge's ``n_samples``, else
    the table's), at the evaluation's rate per parameter-token; 0 for a method that reads no data."""
    data = _method_tables()[1].get(method)
    if data is None:
        return 0.0
    tokens = data.passes * experts * (texts or data.texts) * text_tokens
    return cal.eval_s_per_tparam_token * parameters * tokens / 1e12


def merge_seconds(parameters: int, inputs: int, cal: Calibration, method: Optional[str] = None,
                  texts: Optional[int] = None, text_tokens: int = TEXT_TOKENS) -> float:
    """The start, then the method's rate fitted from the user's run (``--calibrate-from``) x parameters read, or
    task arithmetic's rate x its factor (1 when unmeasured) plus its data passes. ``inputs``: the experts and the
    base."""
    fitted = dict(cal.method_rates).get(method)
    if fitted is not None:
        return cal.merge_start_s + fitted * parameters * inputs / GB
    f = factor(method, cal.device)
    return (cal.merge_start_s + read_seconds(parameters, inputs, cal) * (f.value if f else 1.0)
            + data_seconds(method, parameters, inputs - 1, cal, texts, text_tokens))


def unpriced(methods: Iterable[Optional[str]], cal: Calibration) -> List[str]:
    """The methods priced as task arithmetic for want of a measurement on ``cal``'s device (the dry run names
    them)."""
    fitted = dict(cal.method_rates)
    return [m for m in dict.fromkeys(methods)
            if m not in fitted and factor(m, cal.device) is None and m not in _method_tables()[1]]


def dtype_factor(dtype: Optional[str], cal: Calibration) -> float:
    """The evaluation rate at ``dtype`` (None: float32) relative to the one ``cal`` was measured at."""
    table = EVAL_DTYPE_FACTORS.get(cal.device, {})

    def of(d):
        return table[d].value if d in table else 1.0

    return of(dtype or "float32") / of(cal.eval_dtype)


def eval_seconds(parameters: int, tokens: int, cal: Calibration, dtype: Optional[str] = None) -> float:
    """Start, reading the model once (at the merges' read rate), then scoring its tokens with weights in ``dtype``."""
    return (cal.eval_start_s + read_seconds(parameters, 1, cal)
            + cal.eval_s_per_tparam_token * dtype_factor(dtype, cal) * parameters * tokens / 1e12)


def merge_peak_bytes(largest_tensor: int, inputs: int, model_bytes: int, bytes_per_param: int = 2) -> int:
    """mergekit holds one tensor of every input at a time, in float32 for the math, plus the output shard it is
    writing (the model, 5 GB at most): RAM on the CPU, GPU memory with --merge-device cuda."""
    return largest_tensor * (inputs * 4 + bytes_per_param) + min(5 * int(GB), model_bytes)


def eval_peak_bytes(parameters: int, bytes_per_param: int = 2) -> int:
    """GPU memory of one evaluation: the weights plus ~20% for activations at lm-eval's batch size."""
    return int(parameters * bytes_per_param * 1.2)


def record_bytes(tasks: int) -> int:
    """One result record (scores, lm-eval's configs and versions): 2.4 KB for a 2-task suite, measured on 44 records
    of a demo-size run on this machine; without ``--record-items`` (which adds every document's score)."""
    return 1000 + 700 * tasks


@dataclass(frozen=True)
class Scoring:
    """What the dry run needs of the evaluation (the caller reads the suite and options: sampling knows no eval)."""

    tasks: List[str]
    limit: Optional[float] = None  # items per task: a number, or a fraction of each task
    slurm_tasks: int = 64  # --slurm-array-parallelism
    dtype: Optional[str] = None  # the weights' dtype of the evaluation (the suite's, or --dtype); None: float32
    cpu_workers: Optional[int] = None  # --workers on a CPU (None: the default, one per core up to four)
    cpu_default_workers: int = 1  # what the default is on this machine
    sizes: Sizes = field(default_factory=dict)  # task -> (items, tokens per item): the suites' (eval.suites.task_sizes)


@dataclass(frozen=True)
class Merge:
    """One merge to price: its method (None: unknown), the models it reads (its experts and the base) and, for a
    data-based method, the texts per expert its hyperparameters set (None: the table's)."""

    method: Optional[str]
    inputs: int
    texts: Optional[int] = None


@dataclass(frozen=True)
class Study:
    """What the plan asks for: the units the rates multiply."""

    parameters: int
    merges: Sequence[Merge]
    models_evaluated: int  # base, experts, merges (0: not evaluated)
    tokens_per_model: int
    text_tokens: int = TEXT_TOKENS  # tokens per calibration text of a data-based merge
    eval_dtype: Optional[str] = None  # the evaluation's weights' dtype (None: float32)


@dataclass(frozen=True)
class Executor:
    """Where the work runs: ``gpus`` at once; ``slurm_tasks``: an array whose every job is a fresh process."""

    name: str
    gpus: int
    slurm_tasks: int = 0
    eval_slowdown: float = 1.0  # each evaluation's time against the calibration's (cpu_eval_slowdown)
    model_jobs: bool = False  # each merged model merged and scored in one job on the cluster (``wildmerge.cluster``)


# On a CPU the evaluation rates are the machine's throughput with the default workers (one one-thread worker per
# core). Fewer workers lose it in proportion: a worker's extra threads stall at barriers instead of adding speed.
# Measured on 2 quiet cores (benchmarks/results/eval_workers_demo_main_job_cpu2.txt): the demo main job's
# evaluations took 60.7 s with one two-thread worker against 28.5 s with two one-thread workers (2.13x; the job's
# 88.9 s and 56.7 s less its merges and start, 28.2 s in both).
def cpu_eval_slowdown(scoring: "Scoring") -> float:
    """How much slower each CPU evaluation runs than the default workers' rate: default workers / ``--workers``."""
    if not scoring.cpu_workers:
        return 1.0
    return max(1.0, scoring.cpu_default_workers / scoring.cpu_workers)


def executor_time(study: Study, cal: Calibration, ex: Executor, job_start_s: float = 60.0) -> Dict[str, float]:
    """Wall seconds and GPU-hours on ``ex``: the merges first, one per GPU (the sampler's merge workers; under Slurm
    on one GPU of the submitting machine), then the evaluations one per GPU (local / Ray) or one array task each
    (Slurm: each also pays ``job_start_s`` to start Python, import lm-eval and wait for its node); the run's own
    start (``run_start_s``) once, on the wall clock."""
    merges = sum(merge_seconds(study.parameters, m.inputs, cal, m.method, m.texts, study.text_tokens)
                 for m in study.merges)
    per_model = eval_seconds(study.parameters, study.tokens_per_model, cal, study.eval_dtype) * ex.eval_slowdown
    if ex.model_jobs:
        return _model_jobs_time(study, cal, ex, merges, per_model, job_start_s if ex.slurm_tasks else 0.0)
    if ex.slurm_tasks:
        evals = study.models_evaluated * (per_model + job_start_s)
        eval_wall = math.ceil(study.models_evaluated / ex.slurm_tasks) * (per_model + job_start_s)
        return {"wall_s": cal.run_start_s + merges + eval_wall, "gpu_hours": (merges + evals) / HOUR,
                "merge_s": merges, "eval_s": evals}
    evals = study.models_evaluated * per_model
    wall = cal.run_start_s + merges / ex.gpus + math.ceil(study.models_evaluated / ex.gpus) * per_model
    return {"wall_s": wall, "gpu_hours": wall * ex.gpus / HOUR, "merge_s": merges, "eval_s": evals}


def _model_jobs_time(study: Study, cal: Calibration, ex: Executor, merges: float, per_model: float,
                     job_start_s: float) -> Dict[str, float]:
    """Merged models as cluster jobs (merge, then score, each job on its own GPU, ``ex.gpus`` at once), then the
    base and experts as evaluation jobs: the merges leave the submitting node."""
    n, others = len(study.merges), max(study.models_evaluated - len(study.merges), 0)
    one = (merges / n if n else 0.0) + (per_model if study.models_evaluated else 0.0) + job_start_s
    wall = cal.run_start_s + math.ceil(n / ex.gpus) * one + math.ceil(others / ex.gpus) * (per_model + job_start_s)
    busy = n * one + others * (per_model + job_start_s)
    return {"wall_s": wall, "gpu_hours": busy / HOUR, "merge_s": merges, "eval_s": study.models_evaluated * per_model}


def fit_merges(points: Sequence[Tuple[str, float, float]], default_start: float) -> Tuple[float, Dict[str, float]]:
    """(start, {method: seconds per G read}) by least squares on ``seconds = start + rate_method x G read`` over
    ``points`` (method, G parameters read, seconds): one start shared, one rate per method, each merge weighted by
    1 / seconds^2 (relative errors: a slow, noisy method does not set the start of the fast ones). With one read size
    per method the reads cannot tell the start: it is then ``default_start`` (at most the fastest merge). Neither
    goes below 0."""
    groups: Dict[str, List[Tuple[float, float, float]]] = {}
    for method, g, s in points:
        groups.setdefault(method, []).append((g, s, 1.0 / max(s, 1e-3) ** 2))
    # for a fixed start each method's rate is its weighted slope through the start; the start minimising what is
    # left: residual_i = (s_i - g_i A/C) - start (1 - g_i B/C), A = sum w g s, B = sum w g, C = sum w g^2 (its method)
    num = den = 0.0
    for pts in groups.values():
        a, b, c = (sum(w * g * s for g, s, w in pts), sum(w * g for g, _, w in pts), sum(w * g * g for g, _, w in pts))
        for g, s, w in pts:
            x, y = 1 - g * b / c, s - g * a / c
            num, den = num + w * x * y, den + w * x * x
    if den > 1e-12 * sum(w for pts in groups.values() for *_, w in pts):
        start = max(num / den, 0.0)
    else:
        start = min(default_start, min(s for _, _, s in points))
    rates = {m: max(sum(w * g * (s - start) for g, s, w in pts) / sum(w * g * g for g, _, w in pts), 0.0)
             for m, pts in groups.items()}
    return start, rates


def _method_of(info, folder) -> Optional[str]:
    """A merge record's method; records before it was written: the merge id's first part (``ta__n02_s00``)."""
    return info.method or (info.model_id or folder.name).split("__")[0] or None


def _damaged_or(path, run_dir) -> dict:
    """A JSON record of the calibrating run; a damaged one is a ``ConfigError`` naming it."""
    from wildmerge.errors import ConfigError

    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--calibrate-from {run_dir}: {path} is damaged ({type(exc).__name__}); rerun that run's "
                          f"command to rewrite it, or give another run folder") from None
    if not isinstance(record, dict):
        raise ConfigError(f"--calibrate-from {run_dir}: {path} is damaged (not a JSON object); rerun that run's "
                          f"command to rewrite it, or give another run folder")
    return record


def calibrate_from(run_dir, sizes: Optional[Sizes] = None) -> Calibration:
    """Rates from an earlier run: a start per merge and a rate per method (``fit_merges``) from its merges' records
    (``models/*/merge_info.json``: method, experts, seconds, device) on the device its evaluations ran on; task
    arithmetic's rate (the table's factors multiply it for methods the run lacks) from its own TA merges, else the
    default's. Its result records give the evaluations' start (the fastest job less reading the model) and rate per
    parameter-token (what the others took beyond the fastest, spread by tokens: each record's tasks at ``sizes``,
    the suites' declared sizes, a task not in them at DEFAULT_ITEMS x DEFAULT_TOKENS)."""
    from wildmerge.errors import ConfigError
    from wildmerge.run import RunFolder, read_merge_info

    run = RunFolder(run_dir)
    models = sorted(p for p in run.models_dir.glob("*") if (p / "config.json").is_file()) \
        if run.models_dir.is_dir() else []
    if not models:
        raise ConfigError(f"--calibrate-from {run_dir}: no merged model with a config.json under {run.models_dir}; "
                          f"give the folder of a run that merged at least one model")
    params = parameters_from_config(_damaged_or(models[0] / "config.json", run_dir))
    merges = [(_method_of(info, m), len(info.experts) + 1, info.seconds, info.device or "cpu")
              for m in models for info in [read_merge_info(m)] if info is not None and info.seconds is not None]
    results = [_damaged_or(p, run_dir) for p in sorted(run.eval_root.glob("*/results/*.json"))]
    results = [r for r in results if r.get("status") == "ok" and r.get("seconds") is not None]
    if not merges and not results:
        raise ConfigError(f"--calibrate-from {run_dir}: no timed merge or evaluation in it")
    if results:
        device = "cuda" if any(str(r.get("device", "")).startswith("cuda") for r in results) else "cpu"
    else:
        devices = [d for *_, d in merges]
        device = "cuda" if devices.count("cuda") > devices.count("cpu") else "cpu"
    base = DEFAULTS[device]
    own = [(m, params * n / GB, s) for m, n, s, d in merges if d == device]
    start, rates = fit_merges(own, base.merge_start_s) if own else (base.merge_start_s, {})
    merge_rate = rates.get("ta", base.merge_s_per_gparam_read)
    eval_start, token_rate, eval_dtype = base.eval_start_s, base.eval_s_per_tparam_token, base.eval_dtype
    if results:
        eval_dtype = (results[0].get("settings") or {}).get("dtype") or "float32"
        seconds = sorted(float(r["seconds"]) for r in results)
        eval_start = max(seconds[0] - merge_rate * params / GB, 0.0)  # the fastest job, less reading the model
        tokens = sum(t for r in results for t in _record_tokens(r, sizes))
        left = sum(seconds) - seconds[0] * len(seconds)
        if tokens and left > 0:
            token_rate = left / (params * tokens / 1e12)
    other = len(merges) - len(own)
    return replace(base, merge_s_per_gparam_read=merge_rate, eval_start_s=eval_start,
                   eval_s_per_tparam_token=token_rate, merge_start_s=start, method_rates=tuple(sorted(rates.items())),
                   eval_dtype=eval_dtype if eval_dtype in ("float32", "bfloat16", "float16") else "float32",
                   source=f"from run {run.root} (--calibrate-from): {len(results)} timed evaluation(s), "
                          f"{len(own)} timed merge(s) on {device} ({', '.join(sorted(rates)) or 'none'}; "
                          f"{params / 1e6:.4g}M parameters each"
                          f"{f'; {other} on another device left out' if other else ''})", error=1.5)


def _record_tokens(record: dict, sizes: Optional[Sizes]) -> List[int]:
    tasks = [t["task"] for t in record.get("tasks") or []]
    return [tokens for _, tokens in suite_tokens(tasks, (record.get("settings") or {}).get("limit"), sizes).values()]
