"""Does the task alignment score pick good hyperparameters, and what does it save? (the reality-check paper, Figs. 3-4)

On the demo family (12 experts, each with its own unlabelled text) every grid point is (a) scored by TAS in memory
and (b) merged by mergekit to disk and evaluated on the demo suite. Printed per grid: Spearman correlation of TAS
(each distance) with the suite's mean accuracy (a good proxy is strongly negative), the regret (best evaluated
accuracy minus the accuracy of the TAS choice; both from ``wildmerge.analysis.tas.check``, what ``wildmerge tune
--check`` reports on a user's pool) and the cost ratio (merge + evaluate) / TAS sweep, same run; plus
peak RSS (VmHWM). ``--large`` adds the per-candidate TAS cost on a random Qwen3 of >= 50M parameters.

    python benchmarks/bench_tas.py --limit 20 --threads 1 --small --large   # what the README reports (CPU)
    python benchmarks/bench_tas.py --limit 0                        # full demo suite (every item)
    python benchmarks/bench_tas.py --grids ta --large               # the 10-candidate TA benchmark + 50M model
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import yaml

from wildmerge.resources import peak_rss_mib

GRIDS = {  # the reality-check paper's grids (TA lambda 0.1..1.0) and the in-the-wild study's TIES / SB axes, at most 10 points
    "ta": ("ta", {"lambda": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]}),
    "ties": ("ties", {"density": [0.1, 0.3, 0.7], "lambda": [0.3, 0.6, 1.0]}),
    "sb": ("ta_sb", {"beta": [0.0, 0.1, 0.2, 0.4, 0.7, 1.0]}),
}
SMALL = {  # --small: what fits a busy 2-core CPU next to TA's 10 points
    "ties": ("ties", {"density": [0.1, 0.5], "lambda": [0.5, 1.0]}),
    "sb": ("ta_sb", {"beta": [0.0, 0.2, 0.5, 1.0]}),
}


def merge_to_disk(recipe: dict, out: Path) -> float:
    """The stock path: mergekit-yaml (in process) writes the checkpoint; seconds taken (kept beside it for reruns)."""
    timing = out.with_suffix(".seconds")
    if (out / "model.safetensors").is_file():
        return float(timing.read_text()) if timing.is_file() else float("nan")
    from wildmerge import _autoload
    from wildmerge.atomic import atomic_dir

    _autoload.install()
    import mergekit.merge  # noqa: F401
    from mergekit.scripts.run_yaml import main as mergekit_yaml

    start = time.perf_counter()
    path = out.with_suffix(".yml")
    path.write_text(yaml.safe_dump(recipe))
    with atomic_dir(out) as tmp:
        mergekit_yaml.main([str(path), str(tmp)], standalone_mode=False)
    seconds = time.perf_counter() - start
    timing.write_text(f"{seconds:.3f}")
    return seconds


def study(args) -> dict:
    from wildmerge.analysis.tas.check import plot, summarize
    from wildmerge.analysis.tas.setup import load_sweep
    from wildmerge.analysis.tas.sweep import check_points, sweep
    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.options import EvalOptions
    from wildmerge.eval.store import ResultStore
    from wildmerge.recipes.method import load_method_recipe
    from wildmerge.recipes.render import render_recipe
    from wildmerge.pools import load_pool

    out = Path(args.out)
    start = time.perf_counter()
    tas = load_sweep(load_pool("demo"), out / "tune", samples=args.samples)
    load_seconds = time.perf_counter() - start
    results = {"load_seconds": load_seconds, "grids": {}}
    for grid_name in args.grids:
        method_name, grid = (SMALL if args.small and grid_name in SMALL else GRIDS)[grid_name]
        method = load_method_recipe(method_name)
        keys = list(grid)
        points = [dict(zip(keys, v)) for v in np.array(np.meshgrid(*grid.values(), indexing="ij")).reshape(
            len(keys), -1).T.tolist()]
        check_points(method, points, grid_name)
        start = time.perf_counter()
        records = sweep(tas, method, points, out / "tune" / grid_name)
        tas_seconds = sum(r["seconds"] for r in records)
        sweep_wall = time.perf_counter() - start
        paths, merge_seconds = [], 0.0
        for r in records:
            recipe = render_recipe(method, tas.base_path, list(tas.expert_paths.values()), r["hparams"])
            path = out / "models" / grid_name / r["candidate"]
            path.parent.mkdir(parents=True, exist_ok=True)
            merge_seconds += merge_to_disk(recipe, path)
            paths.append(str(path))
        start = time.perf_counter()
        ev = evaluate_models(paths, "demo", out / "eval", EvalOptions(limit=args.limit or None))
        eval_wall = time.perf_counter() - start
        store = ResultStore(ev["store"])
        rows = []
        for r, path in zip(records, paths):
            record = store.load(ev["index"][path])
            scores = record["scores"]
            rows.append({**r, "accuracy": float(np.mean(list(scores.values()))), "scores": scores,
                         "eval_seconds": record.get("seconds")})
        acc = [row["accuracy"] for row in rows]
        best = max(acc)
        summary = {"points": len(rows), "best_accuracy": best, "tas_seconds": tas_seconds,
                   "tas_sweep_wall": sweep_wall, "merge_seconds": merge_seconds,
                   "eval_seconds": sum(row["eval_seconds"] or 0 for row in rows), "eval_wall": eval_wall}
        for d in ("l2", "l1", "cosine", "kl"):  # the package's maths (``wildmerge tune --check``), every distance
            check = summarize(rows, d)
            summary[d] = {"spearman": check["spearman"], "choice": check["choice"],
                          "choice_accuracy": check["choice_accuracy"], "regret": best - check["choice_accuracy"],
                          "tracks": check["tracks"]}
        summary["cost_ratio"] = (summary["merge_seconds"] + summary["eval_seconds"]) / max(tas_seconds, 1e-9)
        results["grids"][grid_name] = {"summary": summary, "rows": rows}
        plot(grid_name, rows, out, ylabel="demo suite mean accuracy")
        print(json.dumps({grid_name: summary}, indent=1))
    return results


def large(args) -> dict:
    """Per-candidate TAS cost on a random Qwen3 of >= 50M parameters with 3 experts and random-token data."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from wildmerge.analysis.tas.sweep import TASSweep, sweep
    from wildmerge.recipes.method import load_method_recipe

    root = Path(args.out) / "large"
    cfg = Qwen3Config(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                      num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=512,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    n_params = sum(p.numel() for p in base.parameters())
    if not (root / "base" / "model.safetensors").is_file():
        base.save_pretrained(root / "base")
        for i in range(3):
            with torch.no_grad():
                for p in base.parameters():
                    p.add_(0.002 * torch.randn_like(p))
            base.save_pretrained(root / f"expert_{i}")
    experts = {f"expert_{i}": str(root / f"expert_{i}") for i in range(3)}
    gen = torch.Generator().manual_seed(1)
    batches = {e: [(torch.randint(0, 32000, (32, args.large_seq), generator=gen),
                    torch.ones(32, args.large_seq, dtype=torch.long)) for _ in range(args.large_samples // 32 or 1)]
               for e in experts}
    start = time.perf_counter()
    tas = TASSweep(root / "tune", str(root / "base"), experts, batches, data_key=f"random-{args.large_samples}")
    load_seconds = time.perf_counter() - start
    records = sweep(tas, load_method_recipe("ta"), [{"lambda": v} for v in (0.3, 0.6, 1.0)], root / "tune" / "ta")
    per = [r["seconds"] for r in records]
    return {"parameters": n_params, "experts": 3, "samples_per_expert": args.large_samples, "seq_len": args.large_seq,
            "load_seconds": load_seconds, "per_candidate_seconds": per, "mean_per_candidate": float(np.mean(per))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/bench-tas")
    p.add_argument("--grids", default="ta,ties,sb", help=f"comma-separated, from {', '.join(GRIDS)}")
    p.add_argument("--limit", type=int, default=20, help="demo-suite items per task (0 = all)")
    p.add_argument("--samples", type=int, default=128, help="unlabelled samples per expert")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--large", action="store_true", help="also time TAS per candidate on a >= 50M model")
    p.add_argument("--small", action="store_true", help="smaller TIES and SB grids (TA keeps its 10 points)")
    p.add_argument("--large-seq", type=int, default=32)
    p.add_argument("--large-samples", type=int, default=32)
    p.add_argument("--skip-study", action="store_true")
    args = p.parse_args()
    args.grids = [g for g in args.grids.split(",") if g]
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    results = {"args": vars(args)}
    if not args.skip_study:
        results.update(study(args))
    if args.large:
        results["large"] = large(args)
        print(json.dumps({"large": results["large"]}, indent=1))
    results["peak_rss_mib"] = peak_rss_mib()
    print(f"peak RSS (VmHWM): {results['peak_rss_mib']:.0f} MiB")
    from wildmerge.atomic import write_json

    write_json(Path(args.out) / "results.json", results)


if __name__ == "__main__":
    main()
