"""The honest-signal table of the demo family: does it behave like fine-tuned LLMs do?

Each specialist should beat the base on its own skill, and an average of the experts should score differently from
the base. The scores come from the real pipeline (a run folder with a plan, the evaluation harness, the leaderboard's
score table: ``wildmerge demo report``); this module only turns them into the table and its Markdown.
"""

import json
from pathlib import Path

MC_METRIC, GEN_METRIC = "acc,none", "exact_match,none"
AVERAGE = "average_all_experts"


def metric_of(task: str) -> str:
    from wildmerge.families.demo.tasks import GENERATION_TASKS

    return GEN_METRIC if task in GENERATION_TASKS else MC_METRIC


def default_report_dir(info: dict) -> Path:
    return Path(info["root"]).with_name(Path(info["root"]).name + "-report")


def family_table(info: dict, scores: dict) -> dict:
    """The table from ``{model label: {task name: score in [0, 1]}}`` with labels base, expert_XX and
    ``average_all_experts``."""
    return _table(info, scores, list(info["task_names"]))


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


def table_csv(table: dict, tasks: list) -> str:
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
