"""Does the opt-in randomized top-k (``topk_solver: randomized``) change what TSV-M and Iso-CTS merge, on the demo
family's real task vectors, and does it change their scores?

1. Kernels: for every matrix the spectral step touches (all 12 experts), the share of each task's optimal rank-k
   energy the randomized basis keeps, the relative difference of the merged update to the exact one, and the
   kernels' time (exact vs randomized, same run).
2. Scores: TSV-M and Iso-CTS merges of seeded expert subsets (n = 4, 8, 12), exact and randomized, scored on the
   ``demo`` suite; mean accuracy of each, and the difference.

    python benchmarks/experiment_topk_solver.py --out runs/topk-solver
"""

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

METHODS = ("tsv_m", "iso_cts")
SIZES = (4, 8, 12)


def task_vectors(info, names):
    """{tensor name: [delta per expert]} for the 2-D non-vocabulary tensors (those the spectral step touches)."""
    from safetensors.torch import load_file

    base = load_file(str(Path(info["base"]) / "model.safetensors"))
    experts = [load_file(str(Path(info["experts"][n]) / "model.safetensors")) for n in names]
    out = {}
    for key, b in base.items():
        if b.ndim == 2 and "embed" not in key and "lm_head" not in key:
            out[key] = [e[key].double() - b.double() for e in experts]
    return out


def kernel_report(info, names) -> None:
    from wildmerge.plugins import linalg, spectral

    deltas = task_vectors(info, names)
    print(f"\n## Kernels on the demo family's task vectors ({len(names)} experts, {len(deltas)} matrices)\n")
    print("| kernel | energy kept (min / mean) | update difference (max / mean) | exact s | randomized s |")
    print("|---|---:|---:|---:|---:|")
    k = max(1, min(next(iter(deltas.values()))[0].shape) // len(names))
    kept = []
    for ds in deltas.values():
        for d in ds:
            s_opt = torch.linalg.svdvals(d)[:k]
            _, s_rand, _ = linalg.randomized_svds([d], k, None, torch.float64)
            kept.append(float((s_rand[0] ** 2).sum() / (s_opt ** 2).sum()))
    from wildmerge.plugins.methods import IsoCTSParams, TSVMParams

    for name, kernel in (("tsv_m", TSVMParams.with_defaults(spectral.tsv_m)),
                         ("iso_cts", IsoCTSParams.with_defaults(spectral.iso_cts))):
        diffs, times = [], {"exact": 0.0, "randomized": 0.0}
        for ds in deltas.values():
            outs = {}
            for solver in times:
                t = time.perf_counter()
                outs[solver] = kernel(ds, topk_solver=solver)
                times[solver] += time.perf_counter() - t
            diffs.append(float((outs["randomized"] - outs["exact"]).norm() / outs["exact"].norm()))
        energy = f"{min(kept):.4f} / {sum(kept) / len(kept):.4f}" if name == "tsv_m" else "(per task, projected)"
        print(f"| {name} | {energy} | {max(diffs):.3f} / {sum(diffs) / len(diffs):.3f} | "
              f"{times['exact']:.2f} | {times['randomized']:.2f} |")


def merge_all(info, names, out: Path) -> dict:
    """{(method, n, solver): merged folder}, merged in this process (each one skipped if already there)."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    from wildmerge.recipes.render import render_recipe

    rng = random.Random(0)
    merged = {}
    for n in SIZES:
        subset = sorted(rng.sample(names, n))
        for method in METHODS:
            for solver in ("exact", "randomized"):
                folder = out / "models" / f"{method}-n{n}-{solver}"
                merged[(method, n, solver)] = folder
                if (folder / "config.json").exists():
                    continue
                recipe = render_recipe(method, info["base"], [info["experts"][e] for e in subset],
                                       {"topk_solver": solver})
                run_merge(MergeConfiguration.model_validate(recipe), str(folder),
                          options=MergeOptions(copy_tokenizer=True, quiet=True), config_source=yaml.safe_dump(recipe))
    return merged


def score_report(info, merged: dict, out: Path) -> None:
    models = [str(p) for p in merged.values()]
    subprocess.run([sys.executable, "-m", "wildmerge.cli", "eval", "--suite", "demo", "--out", str(out / "eval"),
                    *[a for m in models for a in ("--model", m)]], check=True)
    index = json.loads((out / "eval" / "demo" / "index.json").read_text())

    def mean(path) -> float:
        record = json.loads((out / "eval" / "demo" / "results" / f"{index['models'][str(path)]}.json").read_text())
        scores = [v for v in (record.get("scores") or {}).values() if v is not None]
        return 100 * sum(scores) / len(scores)

    print("\n## Demo-suite mean accuracy, exact vs randomized top-k\n")
    print("| method | n | exact | randomized | difference |\n|---|---:|---:|---:|---:|")
    for method in METHODS:
        for n in SIZES:
            e, r = mean(merged[(method, n, "exact")]), mean(merged[(method, n, "randomized")])
            print(f"| {method} | {n} | {e:.1f} | {r:.1f} | {r - e:+.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/topk-solver")
    ap.add_argument("--no-eval", action="store_true", help="kernels only")
    args = ap.parse_args()
    from wildmerge.families.demo.family import ensure_family

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    info = ensure_family()
    names = sorted(info["experts"])
    kernel_report(info, names)
    if not args.no_eval:
        score_report(info, merge_all(info, names, out), out)


if __name__ == "__main__":
    main()
