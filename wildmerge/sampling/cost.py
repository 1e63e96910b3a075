"""What a study will cost before it runs: merges, evaluations, disk and wall time per executor (``--dry-run``).

One linear model, scaled by parameters and tokens: a merge costs ``seconds per parameter read`` x parameters x the
models it reads; an evaluation costs a fixed start (load the model, build the tasks) plus ``seconds per
parameter-token`` x parameters x the tokens its items score. The two rates come from a calibration: the user's own
earlier run (``--calibrate-from RUN``: its merge records and result records) or the defaults below. The arithmetic
is here, in small functions; ``dryrun.py`` prints it.
"""

import json
import math
from dataclasses import dataclass, replace
from typing import Dict, Iterable, List, Optional

GB, HOUR = 1e9, 3600.0

# Items (documents) and scored tokens per item (context and every choice, as lm-eval sends them) of the paper16
# tasks in lm-eval 0.4: item counts are the test / validation splits lm-eval scores; tokens per item are estimates
# (prompt length x choices, few-shot examples included; one context for single-letter choices, which lm-eval's HF
# backend scores in one pass: mmlu, mmlu_pro), good to about a factor of 2. A task not listed counts
# DEFAULT_ITEMS x DEFAULT_TOKENS (the embedded families' tasks: 80-100 short items).
TASK_ITEMS = {"arc_easy": (2376, 160), "arc_challenge": (1172, 180), "boolq": (3270, 300),
              "commonsense_qa": (1221, 200), "hellaswag": (10042, 440), "winogrande": (1267, 60),
              "piqa": (1838, 100), "openbookqa": (500, 100), "headqa": (5484, 250), "prost": (18736, 160),
              "truthfulqa_mc1": (817, 1500), "medmcqa": (4183, 240), "leaderboard_gpqa": (1192, 1000),
              "leaderboard_bbh": (5761, 2400), "mmlu": (14042, 150), "leaderboard_mmlu_pro": (12032, 1600)}
DEFAULT_ITEMS, DEFAULT_TOKENS = 100, 100


@dataclass(frozen=True)
class Calibration:
    """Per-unit costs on one kind of device, and where they came from."""

    device: str  # cpu or cuda
    merge_s_per_gparam_read: float  # merge seconds per 1e9 parameters read (every input model, base included)
    eval_start_s: float  # per evaluated model: load it, build the tasks
    eval_s_per_tparam_token: float  # evaluation seconds per 1e12 parameter-tokens scored
    source: str
    error: float  # the estimate is good to about this factor either way


# Defaults. cpu, measured on 2 quiet CPU cores of this project's machine (README.md, docs/demo-family.md):
# merges: the demo main job (`python sample_and_merge.py`, family cached) made 35 merges in 19 s, reading 203 models
# of 1.82M parameters (0.37 G parameters): 51.4 s per G parameters read (mostly mergekit's start per merge).
# Evaluations, fitted to two measurements: the demo's 48 took ~83 s of its 1.8-1.9 min (less the merges and the
# 9 s a finished run takes): 1.73 s per model at 1.82M parameters x 600 items x 100 tokens (0.11 T parameter-tokens);
# the SmolLM2 base (134.5M parameters) scored in 103 s at 40 items x 9 tasks (4.84 T parameter-tokens). Less the
# model's read, the line through both gives 20.0 s per T parameter-tokens and a start of -0.5 s, taken as 0.
# cuda, merges measured: mergekit's task_arithmetic of 12 experts of a 142.9M-parameter Qwen3 (Qwen3-4B's layer
# shapes, bf16 on disk, page cache warm) took 3.58 s (median of 5) on one H100 with --cuda: 1.9 s per G parameters
# read (benchmarks/results/spectral_gpu_h100_k12_paired.md). Evaluations not measured on a GPU yet; assumed: lm-eval's
# HF backend at ~20% of 990 TFLOP/s, 2 FLOP per parameter-token (0.01 s per T), 10 s to start a job besides reading
# the model. `--calibrate-from RUN` replaces either with the user's own run.
DEFAULTS = {
    "cpu": Calibration("cpu", 51.4, 0.0, 20.0,
                       "default: the demo main job and the SmolLM2 base on 2 quiet CPU cores (README.md)", 2.0),
    "cuda": Calibration("cuda", 1.9, 10.0, 0.01,
                        "default: merges measured on one H100 (mergekit task arithmetic, K = 12); evaluations assumed "
                        "(20% of an H100's peak FLOP/s), not measured", 3.0),
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


def suite_tokens(tasks: Iterable[str], limit=None) -> Dict[str, tuple]:
    """Task -> (items, tokens) one model scores; ``limit``: the suite's items per task (a number or a fraction)."""
    out = {}
    for task in tasks:
        items, per_item = TASK_ITEMS.get(task, (DEFAULT_ITEMS, DEFAULT_TOKENS))
        if limit is not None:
            items = min(items, int(limit)) if limit >= 1 else math.ceil(items * limit)
        out[task] = (items, items * per_item)
    return out


def merge_seconds(parameters: int, inputs: int, cal: Calibration) -> float:
    return cal.merge_s_per_gparam_read * parameters * inputs / GB


def eval_seconds(parameters: int, tokens: int, cal: Calibration) -> float:
    """Start, reading the model once (at the merges' read rate), then scoring its tokens."""
    return (cal.eval_start_s + merge_seconds(parameters, 1, cal)
            + cal.eval_s_per_tparam_token * parameters * tokens / 1e12)


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


@dataclass(frozen=True)
class Study:
    """What the plan asks for: the units the rates multiply."""

    parameters: int
    merge_inputs: List[int]  # models each merge reads (its experts and the base)
    models_evaluated: int  # base, experts, merges (0: not evaluated)
    tokens_per_model: int


@dataclass(frozen=True)
class Executor:
    """Where the work runs: ``gpus`` at once; ``slurm_tasks``: an array whose every job is a fresh process."""

    name: str
    gpus: int
    slurm_tasks: int = 0


def executor_time(study: Study, cal: Calibration, ex: Executor, job_start_s: float = 60.0) -> Dict[str, float]:
    """Wall seconds and GPU-hours on ``ex``: the merges first, one per GPU (the sampler's merge workers; under Slurm
    on one GPU of the submitting machine), then the evaluations one per GPU (local / Ray) or one array task each
    (Slurm: each also pays ``job_start_s`` to start Python, import lm-eval and wait for its node)."""
    merges = sum(merge_seconds(study.parameters, n, cal) for n in study.merge_inputs)
    per_model = eval_seconds(study.parameters, study.tokens_per_model, cal)
    if ex.slurm_tasks:
        evals = study.models_evaluated * (per_model + job_start_s)
        eval_wall = math.ceil(study.models_evaluated / ex.slurm_tasks) * (per_model + job_start_s)
        return {"wall_s": merges + eval_wall, "gpu_hours": (merges + evals) / HOUR,
                "merge_s": merges, "eval_s": evals}
    evals = study.models_evaluated * per_model
    wall = merges / ex.gpus + math.ceil(study.models_evaluated / ex.gpus) * per_model
    return {"wall_s": wall, "gpu_hours": wall * ex.gpus / HOUR, "merge_s": merges, "eval_s": evals}


def calibrate_from(run_dir) -> Calibration:
    """Rates from an earlier run: its merges' seconds per parameter read (``models/*/merge_info.json``) and its
    result records' seconds per model (the start: its fastest job less reading the model) and per parameter-token
    (what the others took beyond the fastest, spread by tokens). The device is the one its evaluations ran on."""
    from wildmerge.errors import ConfigError
    from wildmerge.run import RunFolder, read_merge_info

    run = RunFolder(run_dir)
    models = sorted(p for p in run.models_dir.glob("*") if (p / "config.json").is_file()) \
        if run.models_dir.is_dir() else []
    if not models:
        raise ConfigError(f"--calibrate-from {run_dir}: no merged model with a config.json under {run.models_dir}; "
                          f"give the folder of a run that merged at least one model")
    params = parameters_from_config(json.loads((models[0] / "config.json").read_text()))
    read, merge_s = 0, 0.0
    for info in filter(None, map(read_merge_info, models)):
        if info.seconds is not None:
            read += params * (len(info.experts) + 1)
            merge_s += info.seconds
    results = [json.loads(p.read_text()) for p in sorted(run.eval_root.glob("*/results/*.json"))]
    results = [r for r in results if r.get("status") == "ok" and r.get("seconds") is not None]
    device = "cuda" if any(str(r.get("device", "")).startswith("cuda") for r in results) else "cpu"
    base = DEFAULTS[device]
    if not read and not results:
        raise ConfigError(f"--calibrate-from {run_dir}: no timed merge or evaluation in it")
    merge_rate = merge_s / (read / GB) if read else base.merge_s_per_gparam_read
    start, token_rate = base.eval_start_s, base.eval_s_per_tparam_token
    if results:
        seconds = sorted(float(r["seconds"]) for r in results)
        start = max(seconds[0] - merge_rate * params / GB, 0.0)  # the fastest job, less reading the model
        tokens = sum(t for r in results for t in _record_tokens(r))
        left = sum(seconds) - seconds[0] * len(seconds)
        if tokens and left > 0:
            token_rate = left / (params * tokens / 1e12)
    return replace(base, merge_s_per_gparam_read=merge_rate, eval_start_s=start, eval_s_per_tparam_token=token_rate,
                   source=f"--calibrate-from {run.root}: {len(results)} timed evaluation(s), merges reading "
                          f"{read / GB:.3g} G parameters ({params / 1e6:.4g}M each)", error=1.5)


def _record_tokens(record: dict) -> List[int]:
    tasks = [t["task"] for t in record.get("tasks") or []]
    return [tokens for _, tokens in suite_tokens(tasks, (record.get("settings") or {}).get("limit")).values()]
