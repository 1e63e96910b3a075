"""Chain of Merges on the demo family with three kinds of calibration data: each expert's own task text ("true"),
text each expert generates itself (``calibration: generate``, the stand-in for hub pools), and one shared file
given to every expert ("shared", round robin over all experts' texts). With shared data CoM is exactly averaging
(Buzzega et al., arXiv 2508.21421), so the question is how close generated text comes to the true data.

Merges all experts of the demo family once per kind (``wildmerge sample --sizes 1``: n = 12 only), then scores the
base and the three merges on the ``demo`` suite and prints one table (mean accuracy and per task).

    python benchmarks/experiment_com_calibration.py --out runs/com-calibration

Needs the demo family's per-expert calibration text (``<family>/calibration/<expert>.unlabelled.jsonl``).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

KINDS = ("true", "generated", "shared")


def _pools(out: Path, info: dict) -> dict:
    root = Path(info["root"])
    names = sorted(info["experts"])
    texts = {}
    for n in names:
        f = root / "calibration" / f"{n}.unlabelled.jsonl"
        if not f.is_file():
            sys.exit(f"{f} is missing: this demo family ships no per-expert calibration text")
        texts[n] = f.read_text().splitlines()
    shared = [texts[names[i % len(names)]][i // len(names)] for i in range(64)]
    (out / "shared.jsonl").write_text("\n".join(shared) + "\n")
    calibration = {"true": lambda n: str(root / "calibration" / f"{n}.unlabelled.jsonl"),
                   "shared": lambda n: str(out / "shared.jsonl"), "generated": lambda n: "generate"}
    pools = {}
    for kind in KINDS:
        pool = {"name": f"demo-{kind}", "base": {"model": info["base"]},
                "experts": [{"model": info["experts"][n], "name": n, "calibration": calibration[kind](n)}
                            for n in names]}
        pools[kind] = out / f"pool-{kind}.yml"
        pools[kind].write_text(yaml.safe_dump(pool, sort_keys=False))
    return pools


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/com-calibration")
    args = ap.parse_args()
    from wildmerge.families.demo.family import ensure_family

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    info = ensure_family()
    pools = _pools(out, info)
    cli = [sys.executable, "-m", "wildmerge.cli"]
    merged = {}
    for kind, pool in pools.items():
        run = out / f"run-{kind}"
        subprocess.run([*cli, "sample", "--base", str(pool), "--out", str(run), "--methods", "com", "--sizes", "1",
                        "--no-evaluate"], check=True)
        merged[kind] = next(run.glob("models/com__*_full"))
    models = [info["base"], *map(str, merged.values())]
    subprocess.run([*cli, "eval", "--suite", "demo", "--out", str(out / "eval"),
                    *[a for m in models for a in ("--model", m)]], check=True)
    index = json.loads((out / "eval" / "demo" / "index.json").read_text())
    print("| model | mean accuracy | per task |\n|---|---:|---|")
    for label, path in [("base", info["base"]), *[(f"CoM, {k} data", str(p)) for k, p in merged.items()]]:
        job = index["models"][path]
        record = json.loads((out / "eval" / "demo" / "results" / f"{job}.json").read_text())
        scores = {t: v for t, v in (record.get("scores") or {}).items() if v is not None}
        mean = sum(scores.values()) / len(scores) if scores else float("nan")
        print(f"| {label} | {100 * mean:.1f} | " + ", ".join(f"{t} {100 * v:.0f}" for t, v in scores.items()) + " |")


if __name__ == "__main__":
    main()
