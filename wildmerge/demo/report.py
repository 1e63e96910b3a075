"""The honest-signal report: the base, every expert and a merge of all experts, scored by the real lm-eval.

It shows whether the family behaves like LLMs do: each specialist beats the base on its own skill, and an
average of experts scores differently from the base. Scores of each model are saved as they finish
(``scores/<label>.json``), so a killed report resumes; ``report.json`` and ``report.csv`` hold the table.
"""

import json
from pathlib import Path

from wildmerge.atomic import atomic_dir, write_json, write_text

MC_METRIC, GEN_METRIC = "acc,none", "exact_match,none"


def metric_of(task: str) -> str:
    from wildmerge.demo.tasks import GENERATION_TASKS

    return GEN_METRIC if task in GENERATION_TASKS else MC_METRIC


def score_model(path: str, tasks_dir: str, task_names: list, limit=None, batch_size: int = 32) -> dict:
    """``{task: score}`` of one checkpoint with lm-eval's ``simple_evaluate`` (HF backend, CPU, float32)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from wildmerge.demo.train import deterministic

    with deterministic(1):
        res = lm_eval.simple_evaluate(
            model="hf", model_args={"pretrained": str(path), "dtype": "float32"}, device="cpu",
            tasks=list(task_names), task_manager=TaskManager(include_path=str(tasks_dir), include_defaults=False),
            num_fewshot=0, batch_size=batch_size, limit=limit, bootstrap_iters=0, log_samples=False,
        )
    return {t: float(res["results"][t][metric_of(t)]) for t in task_names}


def merge_average(base: str, experts: list, out: Path) -> str:
    """Uniform average of the experts (mergekit ``linear``): the simplest merge, made by the real mergekit."""
    if (out / "config.json").is_file():
        return str(out)
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    config = MergeConfiguration.model_validate({
        "merge_method": "linear", "dtype": "float32",
        "models": [{"model": e, "parameters": {"weight": 1.0}} for e in experts],
        "parameters": {"normalize": True},
    })
    with atomic_dir(out) as tmp:
        run_merge(config, str(tmp), MergeOptions(copy_tokenizer=True, quiet=True))
    return str(out)


def default_report_dir(info: dict) -> Path:
    return Path(info["root"]).with_name(Path(info["root"]).name + "-report")


def family_report(info: dict, out_dir=None, limit=None, progress: bool = True) -> dict:
    """Score base, experts and their average on every demo task; write and print the table; return it."""
    from tqdm.auto import tqdm

    out = Path(out_dir) if out_dir else default_report_dir(info)
    models = {"base": info["base"], **info["experts"]}
    models["average_all_experts"] = merge_average(info["base"], list(info["experts"].values()),
                                                  out / "models" / "average_all_experts")
    tasks = info["task_names"]
    scores = {}
    for label, path in tqdm(models.items(), desc="demo report", unit="model", disable=not progress):
        cache = out / "scores" / f"{label}.json"
        saved = json.loads(cache.read_text()) if cache.is_file() else None
        if saved and saved.get("path") == path and saved.get("limit") == limit and saved.get("family") == info["root"]:
            scores[label] = saved["scores"]
            continue
        scores[label] = score_model(path, info["tasks"], tasks, limit=limit)
        write_json(cache, {"path": path, "limit": limit, "family": info["root"], "scores": scores[label]})
    table = _table(info, scores, tasks)
    write_json(out / "report.json", table)
    write_text(out / "report.csv", _csv(table, tasks))
    print(format_table(table, tasks))
    return table


def _table(info: dict, scores: dict, tasks: list) -> dict:
    manifest = json.loads(Path(info["manifest"]).read_text())
    about = {e["name"]: e for e in manifest["experts"]}
    rows = []
    for label, s in scores.items():
        e = about.get(label, {})
        rows.append({"model": label, "domain": e.get("domain", "-"), "skills": "+".join(sorted(e.get("mixture", {}))),
                     **s, "mean": sum(s.values()) / len(s)})
    base = scores["base"]
    own = []
    for e in manifest["experts"]:  # each single-skill specialist on its own skill, against the base
        if len(e["mixture"]) == 1 and not e["conventions"] and e["world"] == "main":
            task = f"demo_{next(iter(e['mixture']))}"
            own.append({"expert": e["name"], "task": task, "expert_score": scores[e["name"]][task],
                        "base_score": base[task], "margin": scores[e["name"]][task] - base[task]})
    return {"family": info["root"], "seed": info["seed"], "quick": info["quick"],
            "metrics": {t: metric_of(t) for t in tasks}, "rows": rows, "specialists_vs_base": own}


def _csv(table: dict, tasks: list) -> str:
    cols = ["model", "domain", "skills", *tasks, "mean"]
    lines = [",".join(cols)]
    for r in table["rows"]:
        lines.append(",".join(f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    return "\n".join(lines) + "\n"


def format_table(table: dict, tasks: list) -> str:
    """A Markdown table (paste-able into the README), then each specialist's margin over the base."""
    short = [t.removeprefix("demo_") for t in tasks]
    lines = ["| model | domain | " + " | ".join(short) + " | mean |", "|---|---|" + "---:|" * (len(tasks) + 1)]
    for r in table["rows"]:
        lines.append(f"| {r['model']} | {r['domain']} | " + " | ".join(f"{r[t]:.2f}" for t in tasks)
                     + f" | {r['mean']:.3f} |")
    lines.append("")
    for s in table["specialists_vs_base"]:
        lines.append(f"{s['expert']} on {s['task']}: {s['expert_score']:.2f} vs base {s['base_score']:.2f} "
                     f"(margin {s['margin']:+.2f})")
    return "\n".join(lines)
