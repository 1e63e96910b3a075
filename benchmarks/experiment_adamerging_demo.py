"""AdaMerging+TAS against TA+TAS and TA's grid best on the demo family (the reality-check paper, Table 1 "proxy-based").

All 12 experts of the demo pool, each with its own unlabelled text (128 samples, as TAS). TA's grid is the paper's
(lambda 0.1 .. 1.0): every point scored by TAS in memory (TA+TAS takes the argmin) and, with ``--grid-best``, merged
and evaluated (the exhaustive best). AdaMerging+TAS learns per-block, per-expert coefficients and writes a checkpoint
and a stock mergekit recipe. Every chosen model is evaluated on the demo suite (``--limit`` items per task); the
cost of each route (seconds of proxy work, merging, evaluation) is measured in the same run.

    python benchmarks/experiment_adamerging_demo.py --iterations 100 --limit 20 --grid-best
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

LAMBDAS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


def main() -> None:
    from wildmerge.analysis.tas.setup import load_sweep
    from wildmerge.analysis.tas.sweep import select, sweep
    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.options import EvalOptions
    from wildmerge.eval.store import ResultStore
    from wildmerge.analysis.tas.tune import adamerge_pool
    from wildmerge.recipes.method import load_method_recipe
    from wildmerge.recipes.render import render_recipe
    from wildmerge.pools import load_pool

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/experiment-adamerging")
    p.add_argument("--iterations", type=int, default=100, help="AdaMerging steps (the paper: 500)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--samples", type=int, default=128)
    p.add_argument("--limit", type=int, default=20, help="demo-suite items per task (0 = all)")
    p.add_argument("--grid-best", action="store_true", help="also evaluate every TA grid point")
    p.add_argument("--threads", type=int)
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out)
    pool = load_pool("demo")
    result = {"settings": vars(args)}

    start = time.perf_counter()
    tas = load_sweep(pool, out / "tune", samples=args.samples)
    ta = load_method_recipe("ta")
    records = sweep(tas, ta, [{"lambda": v} for v in LAMBDAS], out / "tune" / "ta")
    chosen = select(records, "l2")
    result["ta_tas"] = {"lambda": chosen["hparams"]["lambda"], "seconds": time.perf_counter() - start}

    start = time.perf_counter()
    written = adamerge_pool("demo", iterations=args.iterations, batch_size=args.batch_size, lr=args.lr,
                            samples=args.samples, out=out / "adamerging")
    result["adamerging"] = {"seconds": time.perf_counter() - start,
                            "losses": json.loads(Path(written["coefficients"]).read_text())["losses"][::10]}

    lambdas = LAMBDAS if args.grid_best else [chosen["hparams"]["lambda"]]
    paths = {}
    for lam in lambdas:
        path = out / "models" / f"ta_lambda{lam:g}"
        if not (path / "model.safetensors").is_file():
            _merge(render_recipe(ta, tas.base_path, list(tas.expert_paths.values()), {"lambda": lam}), path)
        paths[f"ta_lambda{lam:g}"] = str(path)
    paths["adamerging_tas"] = str(written["model"])
    start = time.perf_counter()
    ev = evaluate_models(list(paths.values()), "demo", out / "eval", EvalOptions(limit=args.limit or None))
    result["eval_seconds"] = time.perf_counter() - start
    store = ResultStore(ev["store"])
    accuracy = {name: float(np.mean(list(store.load(ev["index"][path])["scores"].values())))
                for name, path in paths.items()}
    result["accuracy"] = accuracy
    result["ta_tas"]["accuracy"] = accuracy[f"ta_lambda{chosen['hparams']['lambda']:g}"]
    if args.grid_best:
        best = max((k for k in accuracy if k.startswith("ta_")), key=accuracy.get)
        result["ta_grid_best"] = {"model": best, "accuracy": accuracy[best]}
    print(json.dumps(result, indent=1))
    (out / "result.json").write_text(json.dumps(result, indent=1))


def _merge(recipe: dict, out: Path) -> None:
    import yaml

    from wildmerge import _autoload
    from wildmerge.atomic import atomic_dir

    _autoload.install()
    import mergekit.merge  # noqa: F401  (our entry point wraps run_merge on import)
    from mergekit.scripts.run_yaml import main as mergekit_yaml

    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.with_suffix(".yml")
    path.write_text(yaml.safe_dump(recipe))
    with atomic_dir(out) as tmp:
        mergekit_yaml.main([str(path), str(tmp)], standalone_mode=False)


if __name__ == "__main__":
    main()
