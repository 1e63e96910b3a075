"""The guided search's plan beside the protocol's, per base, as the two dry runs print them (docs/search.md).

For each pool, ``python sample_and_merge.py --base POOL --evaluate --suite SUITE --dry-run`` (the protocol's own
plan: its merges, its models evaluated, one GPU's hours) and ``wildmerge search --base POOL --budget B --suite SUITE
--dry-run`` at B = ``--fraction`` x the protocol's models evaluated (full evaluations of the suite), with the
search's default arms for that pool. Nothing is resolved or downloaded: the hub pools declare their bases' sizes.
Prints one markdown table.

    python benchmarks/search_plan_table.py --fraction 0.1
"""

import argparse
import contextlib
import io
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's wildmerge, run from anywhere

BASES = ("llama-3.2-3b", "qwen3-4b", "llama-3.1-8b", "qwen3-8b")  # the in-the-wild study's four


def _printed(argv) -> str:
    from wildmerge.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code:
        raise SystemExit(f"{' '.join(argv)} exited {code}:\n{out.getvalue()}")
    return out.getvalue()


def _hours(text: str) -> float:
    """``1.8 h`` / ``32.4 min`` / ``45 s`` as hours."""
    value, unit = re.fullmatch(r"([\d.,]+) (h|min|s)", text.strip()).groups()
    return float(value.replace(",", "")) / {"h": 1, "min": 60, "s": 3600}[unit]


def protocol_plan(pool: str, suite: str, out: str) -> dict:
    text = _printed(["sample", "--pool", pool, "--evaluate", "--suite", suite, "--dry-run", "--out", out])
    merges = int(re.search(r"^  merges: (\d+) ", text, re.M).group(1))
    models = int(re.search(r"^  models evaluated: (\d+) ", text, re.M).group(1))
    gpu = _hours(re.search(r"^    one GPU: +(.+?) wall", text, re.M).group(1))
    return {"merges": merges, "models": models, "gpu_hours": gpu}


def search_plan(pool: str, suite: str, budget: float) -> dict:
    text = _printed(["search", "--base", pool, "--budget", f"{budget:g}", "--suite", suite, "--dry-run"])
    counts = re.search(r"(\d+) bracket\(s\), (\d+) candidates merged at most .*?, (\d+) evaluation jobs, "
                       r"<= ([\d,]+) item evaluations \(([\d.]+) full", text)
    gpu = re.search(r"one GPU: merges (.+?), evaluations (.+?), (.+?) in all", text)
    return {"methods": re.search(r"^  methods: (.+)$", text, re.M).group(1),
            "brackets": int(counts.group(1)), "merges": int(counts.group(2)), "jobs": int(counts.group(3)),
            "full_evaluations": float(counts.group(5)), "merge_hours": _hours(gpu.group(1)),
            "eval_hours": _hours(gpu.group(2)), "gpu_hours": _hours(gpu.group(3))}


def table(fraction: float, suite: str = "paper16", bases=BASES, out: str = "runs/plan-beside-protocol") -> str:
    rows = ["| base | protocol: merges, models evaluated, one GPU | budget (full evaluations) | the search's "
            "methods | search: brackets, candidates merged at most, evaluation jobs | search: full evaluations "
            "at most, one GPU (merges + evaluations) | search / protocol, GPU-hours |",
            "|---|---|---|---|---|---|---|"]
    for base in bases:
        p = protocol_plan(base, suite, f"{out}/{base}")
        budget = fraction * p["models"]
        s = search_plan(base, suite, budget)
        rows.append(f"| {base} | {p['merges']}, {p['models']}, {p['gpu_hours']:.1f} h | {budget:g} | "
                    f"{s['methods']} | {s['brackets']}, {s['merges']}, {s['jobs']} | {s['full_evaluations']:g}, "
                    f"{s['gpu_hours']:.1f} h ({s['merge_hours']:.1f} + {s['eval_hours']:.1f}) | "
                    f"{s['gpu_hours'] / p['gpu_hours']:.3f} |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fraction", type=float, default=0.1, help="the search's budget: this share of the protocol's "
                                                                "models evaluated (default %(default)s)")
    p.add_argument("--suite", default="paper16")
    p.add_argument("--bases", default=",".join(BASES), help="comma-separated pools (default: the four shipped)")
    args = p.parse_args()
    print(table(args.fraction, args.suite, args.bases.split(",")))


if __name__ == "__main__":
    main()
