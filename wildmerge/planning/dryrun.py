"""``--dry-run``: the plan and its cost (merges, disk) without resolving weights or writing anything."""

from collections import Counter
from pathlib import Path

from wildmerge.run import PoolModels, ResolvedModel, SubsetRecord, read_merge_info
from wildmerge.planning.manifest import check_same, draw_for

BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
FAMILY_BYTES_PER_PARAMETER = 4  # the embedded families' checkpoints and their merges are float32 on disk


def _one_model_bytes(pool, methods) -> int | None:
    """Size of one merged model from the base's tensor headers, when the base is on this machine."""
    from wildmerge.checkpoints import param_count, read_config
    from wildmerge.hub import FAMILY_PREFIXES, resolve
    from wildmerge.errors import WildmergeError

    if pool.base.model.startswith(FAMILY_PREFIXES):
        return None  # resolving would build the family; a dry run stays instant
    try:
        base = resolve(pool.base.model, pool.base.revision, download=False,
                       relative_to=Path(pool.source).parent if pool.source else None).path
        params = param_count(base)
    except WildmergeError:  # a dry run never fails on a missing or unreadable base
        return None
    dtypes = [m.recipe.get("out_dtype") or read_config(base).get("dtype") or "bfloat16" for m in methods.values()]
    return params * max(BYTES.get(str(d), 2) for d in dtypes)


def _unresolved(name, ref, domain=None) -> ResolvedModel:
    """A pool model as written in the pool: a dry run resolves nothing."""
    return ResolvedModel(name=name, model=ref, kind="unresolved", path=ref, domain=domain)


def _base_config(pool) -> dict | None:
    """The base's config.json when it is on this machine (a folder or the hub cache); never downloads or builds."""
    from wildmerge.checkpoints import read_config
    from wildmerge.errors import WildmergeError
    from wildmerge.hub import FAMILY_PREFIXES, resolve

    if pool.base.model.startswith(FAMILY_PREFIXES):
        return None
    try:
        return read_config(resolve(pool.base.model, pool.base.revision, download=False,
                                   relative_to=Path(pool.source).parent if pool.source else None).path)
    except WildmergeError:
        return None


def base_parameters(pool, config: dict | None = None) -> int | None:
    """The base's parameter count: the pool's declared ``base.parameters``, else from its config.json when the base
    is on this machine (``config``: that config, already read); None when neither is known."""
    from wildmerge.planning import cost

    if pool.base.parameters:
        return pool.base.parameters
    config = config or _base_config(pool)
    return cost.parameters_from_config(config) if config else None


def print_cost(merges, models_evaluated: int, pool, scoring=None, merge_device: str = "cpu",
               keep_models: str = "all", calibrate_from=None, model_bytes=None) -> None:
    """The cost plan: merges, evaluations, disk, and wall time / GPU-hours per executor (``cost.py``);
    ``scoring``: the suite's tasks, limit and task sizes (``cost.Scoring``; no tasks, or None, when the run is not
    evaluated: its sizes still price ``calibrate_from``'s records);
    ``model_bytes``: one merged model's size (``_one_model_bytes``), else from the parameters."""
    from wildmerge import checkpoints
    from wildmerge.hub import FAMILY_PREFIXES
    from wildmerge.resources import visible_gpus
    from wildmerge.planning import cost

    config = _base_config(pool)
    params = base_parameters(pool, config)
    if not params:
        print(f"  cost: unknown (the base is not on this machine and {pool.source or 'the pool'} declares no size: "
              f"add `parameters: N` to its base)"
              + (f"; --calibrate-from {calibrate_from} has nothing to price until then" if calibrate_from else ""))
        return
    where = "the pool's base.parameters" if pool.base.parameters else "the base's config.json"
    largest = config["vocab_size"] * config["hidden_size"] if config else params // 10
    scoring = scoring or cost.Scoring([])
    tasks = scoring.tasks
    scored = cost.suite_tokens(tasks, scoring.limit, scoring.sizes)
    items, tokens = sum(i for i, _ in scored.values()), sum(t for _, t in scored.values())
    inputs = [len(e.experts) + 1 for e in merges]
    family = pool.base.model.startswith(FAMILY_PREFIXES)  # their texts are short: priced at their measured length
    study = cost.Study(params, [cost.Merge(e.method, len(e.experts) + 1, e.hparams.get("n_samples")) for e in merges],
                       models_evaluated if tasks else 0, tokens,
                       cost.FAMILY_TEXT_TOKENS if family else cost.TEXT_TOKENS, scoring.dtype)
    own = cost.calibrate_from(calibrate_from, scoring.sizes) if calibrate_from else None
    gpu_cal = own if own is not None and own.device == "cuda" else cost.DEFAULTS["cuda"]
    cpu_plan = params < 1e9  # a billion-parameter study on a CPU: tens of thousands of hours, not a plan
    cpu_cal = own if own is not None and own.device == "cpu" else (
        _host_cpu_calibration(scoring.cpu_default_workers) if cpu_plan else cost.DEFAULTS["cpu"])
    print(f"  cost plan ({params / 1e9:.3g} B parameters, from {where}):")
    model_bytes = model_bytes or params * (FAMILY_BYTES_PER_PARAMETER if family else 2)
    most = max(inputs, default=1)
    print(f"    merges: {len(merges)} to do, reading {min(inputs, default=0)}-{max(inputs, default=0)} models each; "
          f"peak {checkpoints.cpu_merge_peak_bytes(model_bytes, most - 1) / cost.GB:.3g} GB RAM with "
          f"--merge-device cpu (every input's files mapped), "
          f"{cost.merge_peak_bytes(largest, most, model_bytes) / cost.GB:.3g} GB GPU memory with --merge-device cuda "
          f"(the GPU plans below)")
    if tasks:
        print(f"    evaluations: {study.models_evaluated} models x {len(tasks)} tasks x {items} items "
              f"(~{tokens / 1e6:.3g}M tokens per model, weights in {scoring.dtype or 'float32'}); "
              f"{cost.eval_peak_bytes(params) / cost.GB:.3g} GB GPU memory each")
    else:
        print("    evaluations: none (not evaluated)")
    kept = model_bytes * (min(len(merges), 1) if keep_models == "none" else len(merges))
    gpus = max(len(visible_gpus()), 8)
    in_flight = min(len(merges), scoring.slurm_tasks)  # model jobs with --keep-models none: one checkpoint each
    print(f"    disk: {kept / cost.GB:.4g} GB of merged checkpoints (--keep-models {keep_models}; Slurm model jobs "
          f"with none: at most {in_flight} at once, {model_bytes * in_flight / cost.GB:.4g} GB), "
          f"~{study.models_evaluated * cost.record_bytes(len(tasks)) / 1e6:.3g} MB of evaluation records")
    executors = [cost.Executor("one GPU", 1), cost.Executor(f"a node, {gpus} GPUs (local)", gpus),
                 cost.Executor(f"Ray, {gpus} GPUs", gpus),
                 cost.Executor(f"Slurm array, {scoring.slurm_tasks} tasks", scoring.slurm_tasks, scoring.slurm_tasks),
                 cost.Executor(f"Ray, {gpus} GPUs, model jobs", gpus, model_jobs=True),
                 cost.Executor(f"Slurm, {scoring.slurm_tasks} model jobs", scoring.slurm_tasks, scoring.slurm_tasks,
                               model_jobs=True)]
    for ex in executors:
        t = cost.executor_time(study, gpu_cal, ex)
        print(f"    {ex.name + ':':<32} {_duration(t['wall_s']):>10} wall, {t['gpu_hours']:,.1f} GPU-hours")
    if cpu_plan:
        # the default and measured rates are the default workers' throughput; a user's own run's are its own
        slowdown = cost.cpu_eval_slowdown(scoring) if cpu_cal is not own else 1.0
        t = cost.executor_time(study, cpu_cal, cost.Executor("cpu", 1, eval_slowdown=slowdown))
        workers = (f"; {scoring.cpu_workers} evaluation worker(s) against the default {scoring.cpu_default_workers}: "
                   f"x{slowdown:.3g}" if slowdown != 1 else "")
        print(f"    {'this machine, CPU:':<32} {_duration(t['wall_s']):>10} wall (merges "
              f"{_duration(t['merge_s'])}, evaluations {_duration(t['eval_s'])}{workers})")
    for cal in dict.fromkeys((gpu_cal, cpu_cal)):
        print(f"    rates ({cal.device}): {cal.source}; good to about x{cal.error:g} either way")
        print(f"    {merge_pricing(cal, [e.method for e in merges], study.text_tokens)}")


def _host_cpu_calibration(workers: int):
    """This machine's CPU rates (``host_rates.py``: measured once per host, then cached), else the built-in ones
    (``WILDMERGE_HOST_RATES=defaults``, or a measurement that failed: said, a dry run does not stop on it).
    ``workers``: the default evaluation workers (1 when the run is not evaluated: its data passes run in one
    merge process)."""
    from wildmerge.planning import cost, host_rates

    try:
        return host_rates.host_calibration(workers) or cost.DEFAULTS["cpu"]
    except host_rates.MeasureError as exc:
        print(f"  note: {exc}; the CPU plan uses the built-in rates")
        return cost.DEFAULTS["cpu"]


def merge_pricing(cal, methods, text_tokens: int) -> str:
    """How the merges of ``methods`` are priced on ``cal``'s device: the start, the rate, each method's factor or
    fitted rate, the data-based methods' passes, and the methods counted as task arithmetic for want of a
    measurement."""
    from wildmerge.planning import cost

    fitted, methods = dict(cal.method_rates), list(dict.fromkeys(methods))
    parts = [f"{m} {fitted[m]:.3g} s per G read (fitted)" if m in fitted
             else f"{m} x{cost.factor(m, cal.device).value:g}"
             for m in methods if m in fitted or cost.factor(m, cal.device)]
    line = (f"merges ({cal.device}): {cal.merge_start_s:.2g} s each + {cal.merge_s_per_gparam_read:.3g} s per G "
            f"parameters read x the method's factor: {', '.join(parts) or 'none measured'}")
    data = [m for m in methods if m in cost.DATA_PASSES and m not in fitted]
    if data:
        line += (f"; {', '.join(f'{m} +{cost.DATA_PASSES[m].passes:g}' for m in data)} forward passes per text of "
                 f"each expert ({text_tokens} tokens a text, at the evaluation's rate; assumed to dominate)")
    unknown = cost.unpriced(methods, cal)
    if unknown:
        line += f"; priced as TA (no measured factor on {cal.device}): {', '.join(map(str, unknown))}"
    return line


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def print_dry_run(run_dir, pool, sampling, methods, sweeps, keep_models: str = "all", scorer=None,
                  tune: bool = False, scoring=None, merge_device: str = "cpu", calibrate_from=None,
                  capped=()) -> int:
    """``capped``: the notes of sweeps whose calibration-sample points were capped (``sample_cap.py``)."""
    from wildmerge.planning.plan import build_entries
    from wildmerge.planning.preflight import fix_for_texts, missing_expert_data, too_few_texts

    existing = check_same(run_dir, sampling)
    draw = None if existing else draw_for(pool, sampling, scorer)
    subsets = existing.subsets if existing else [SubsetRecord(**s.as_dict()) for s in draw.subsets]
    notes = existing.notes if existing else draw.notes
    models = PoolModels(base=_unresolved("base", pool.base.model),
                        experts=[_unresolved(e.label, e.model, e.domain) for e in pool.experts])
    entries = build_entries(run_dir, subsets, models, methods, sweeps)
    merges = [e for e in entries if e.kind == "merge"]
    done = sum(1 for e in merges if read_merge_info(e.path) is not None)
    print(f"dry run: pool {pool.name!r} ({len(pool.experts)} experts), run directory {run_dir}")
    print(f"  subsets: {len(subsets)} ({', '.join(f'n={n}: {c}' for n, c in Counter(s.n for s in subsets).items())})")
    for note in notes:
        print(f"  note: {note}")
    for note in capped:  # before the merges: these points are not in the plan
        print(f"  capped: {note}")
    print(f"  merges: {len(merges)} ({done} already done); per method: "
          + ", ".join(f"{m} {c}" for m, c in Counter(e.method for e in merges).items()))
    size = _one_model_bytes(pool, methods)
    todo = len(merges) - done
    if size is not None:
        need = size * (min(todo, 1) if keep_models == "none" else todo)
        print(f"  disk: {size / 1e9:.3g} GB per merged model, {need / 1e9:.3g} GB needed for the merges to do "
              f"(--keep-models {keep_models})")
    elif not pool.base.parameters:  # a declared size: the cost plan below says the disk
        print("  disk: unknown (the base is not on this machine yet, or is an embedded family (demo:, smollm2:), built "
              "on first use)")
    print(f"  models evaluated: {len(entries)} (base, {len(pool.experts)} experts, {len(merges)} merges)")
    print_cost([e for e in merges if read_merge_info(e.path) is None], len(entries), pool, scoring, merge_device,
               keep_models, calibrate_from, size)
    missing = missing_expert_data(pool, methods, sweeps, tune)  # said before the plan: a real run stops on it
    for line in missing:
        print(f"  MISSING DATA: {line}")
    if missing:
        print(f"  (a real run stops here: add the data to {pool.source or 'the pool file'}, or --exclude those experts)")
    short = too_few_texts(pool, methods, sweeps, kinds=("file",))  # local files only: nothing fetched or built
    if short:
        print(f"  TOO FEW TEXTS: {short}\n  (a real run stops here: {fix_for_texts(pool)})")
    print("  plan:")
    for e in merges:
        print(f"    {e.model_id:<40} n={e.n:<3} {', '.join(e.experts)}")
    return 0
