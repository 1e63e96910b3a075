"""Wall time and peak memory of every merge method against mergekit's built-in task_arithmetic, same inputs.

Builds a Llama of about 57M parameters (hidden 640, 10 layers) and K noisy "experts" of it locally, then merges
K = 2, 6, 12 of them with each method, each merge in a fresh process (so peak RSS is that merge's own), and prints
the ratio to task_arithmetic. ``--kernels`` also times the spectral kernels against a straightforward
implementation of the papers (full float32 SVDs, polar factors by SVD): the "before" of our Gram-route kernels.

    python benchmarks/bench_merge_methods.py [--experts 2 6 12] [--repeat 3] [--kernels] [--cuda]

A method written ``name:float32`` runs with ``svd_precision: float32``, ``name:randomized`` with ``topk_solver:
randomized`` (the opt-in approximate routes; ``name:float32+randomized`` both). With ``--repeat N`` every merge runs
N times and the median is printed (the CPU is shared: compare within one run).
"""

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from wildmerge.resources import peak_rss_mib

METHODS = ["task_arithmetic", "ta", "ties", "model_stock", "tsv_m", "iso_c", "iso_cts", "ta_sb", "ties_sb"]


def build_models(root: Path, n_experts: int, hidden: int, layers: int):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    base_dir = root / "base"
    if not base_dir.exists():
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=8000, hidden_size=hidden, intermediate_size=int(hidden * 2.7),
                          num_hidden_layers=layers, num_attention_heads=10, num_key_value_heads=5,
                          tie_word_embeddings=False)
        AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(base_dir)
    model = None
    for i in range(n_experts):
        out = root / f"expert{i:02d}"
        if out.exists():
            continue
        model = model or AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        expert = {k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items()}
        from safetensors.torch import save_file

        out.mkdir()
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in expert.items()}, out / "model.safetensors",
                  metadata={"format": "pt"})
        (out / "config.json").write_text((base_dir / "config.json").read_text())
    n_params = sum(p.numel() for p in (model or AutoModelForCausalLM.from_pretrained(base_dir)).parameters())
    return str(base_dir), [str(root / f"expert{i:02d}") for i in range(n_experts)], n_params


def _merge_worker(method, base, experts, out, cuda, queue):
    import yaml
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    from wildmerge.recipes.render import render_recipe

    if method == "task_arithmetic":  # mergekit's own, plain: the baseline
        config = {"merge_method": "task_arithmetic", "base_model": base, "dtype": "float32",
                  "models": [{"model": e, "parameters": {"weight": 1.0}} for e in experts]}
    else:
        name, _, variant = method.partition(":")
        config = render_recipe(name, base, experts, variant_overrides(variant))
    options = MergeOptions(copy_tokenizer=False, quiet=True, cuda=cuda, write_model_card=False)
    start = time.perf_counter()
    run_merge(MergeConfiguration.model_validate(config), out, options=options, config_source=yaml.safe_dump(config))
    seconds = time.perf_counter() - start
    queue.put((seconds, peak_rss_mib()))


def variant_overrides(variant):
    """``float32`` / ``randomized`` / ``float32+randomized`` as recipe parameters."""
    known = {"float32": ("svd_precision", "float32"), "randomized": ("topk_solver", "randomized")}
    parts = [v for v in variant.split("+") if v]
    unknown = [v for v in parts if v not in known]
    if unknown:
        raise SystemExit(f"unknown variant {unknown[0]!r}: use float32, randomized or float32+randomized")
    return dict(known[v] for v in parts) or None


def time_merge(method, base, experts, cuda):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as out:
        p = ctx.Process(target=_merge_worker, args=(method, base, experts, out, cuda, queue))
        p.start()
        result = queue.get()
        p.join()
    return result


def naive_kernels():
    """The papers' algorithms written the obvious way: what our kernels replace."""
    import torch

    def svd(a):
        return torch.linalg.svd(a, full_matrices=False)

    def polar(m):
        p, _, qh = svd(m)
        return p @ qh

    def tsv(deltas):
        k = min(deltas[0].shape) // len(deltas)
        parts = [svd(d) for d in deltas]
        u = torch.cat([p[0][:, :k] for p in parts], 1)
        s = torch.cat([p[1][:k] for p in parts])
        v = torch.cat([p[2][:k].T for p in parts], 1)
        return polar(u) @ torch.diag(s) @ polar(v).T

    def iso(deltas):
        u, s, vh = svd(sum(deltas))
        return s.mean() * u @ vh

    def boost(delta, beta=0.2):
        u, s, vh = svd(delta)
        j = int((torch.cumsum(s, 0) / s.sum() >= beta).nonzero()[0])
        s = s.clone()
        s[j + 1:] = s[j]
        return (u * s) @ vh

    return {"tsv_m": tsv, "iso_c": iso, "boost": lambda ds: boost(sum(ds))}


def bench_kernels(hidden, n_tasks):
    """Our kernels against the naive ones, both with our LAPACK threading, and the naive ones with torch's."""
    import contextlib

    import torch

    from wildmerge.plugins import linalg, spectral
    from wildmerge.plugins.methods import IsoCParams, TaskArithmeticSBParams, TSVMParams

    boost = TaskArithmeticSBParams.with_defaults(spectral.subspace_boost)
    ours = {"tsv_m": TSVMParams.with_defaults(spectral.tsv_m), "iso_c": IsoCParams.with_defaults(spectral.iso_c),
            "boost": lambda ds: boost(sum(ds), 0.2)}
    naive = naive_kernels()
    shapes = [(hidden, hidden), (int(hidden * 2.7), hidden)]
    cpu = torch.device("cpu")
    variants = {"naive, torch threads": (naive, contextlib.nullcontext),
                "naive, 1 LAPACK thread": (naive, lambda: linalg.lapack_threads(cpu)),
                "ours": (ours, contextlib.nullcontext)}
    print(f"\nkernels, {n_tasks} task vectors, shapes {shapes}, best of 3 (torch threads: {torch.get_num_threads()})")
    print(f"{'kernel':8} " + " ".join(f"{v:>23}" for v in variants) + f" {'naive/ours':>11}")
    for name in ours:
        times = {}
        for label, (fns, ctx) in variants.items():
            best = float("inf")
            for _ in range(3):
                deltas_per_shape = [[torch.randn(*s) for _ in range(n_tasks)] for s in shapes]
                with ctx():
                    t = time.perf_counter()
                    for ds in deltas_per_shape:
                        fns[name](ds)
                    best = min(best, time.perf_counter() - t)
            times[label] = best
        print(f"{name:8} " + " ".join(f"{t:23.3f}" for t in times.values())
              + f" {times['naive, 1 LAPACK thread'] / times['ours']:10.2f}x")


def bench_floor(hidden, layers, n_tasks, ta_seconds):
    """The exact kernels' unavoidable LAPACK/BLAS calls over the benchmark model's matrices, timed alone.

    Per matrix (r = min(m, n), k = r / T): TSV-M needs T Gram matrices (syrk) and T partial eigensolves (top k)
    for the per-task triplets, then two r x r eigensolves for the polar factors; Iso-C and Subspace Boosting one
    Gram and one full eigensolve. Whatever else a kernel does comes on top: this is the floor of the exact route.
    """
    import torch

    from wildmerge.plugins import linalg

    inter = int(hidden * 2.7)
    shapes = [(hidden, hidden), (hidden // 2, hidden), (hidden // 2, hidden), (hidden, hidden),
              (inter, hidden), (inter, hidden), (hidden, inter)]  # q, k, v, o, gate, up, down
    cpu = torch.device("cpu")

    def tall(shape):
        return torch.randn(max(shape), min(shape), dtype=torch.float64)

    def per_task(shape):
        k = max(1, min(shape) // n_tasks)
        gram = linalg.upper_gram(tall(shape))
        return lambda: linalg.top_eigh(gram, k) if 4 * k <= min(shape) else torch.linalg.eigh(gram, UPLO="U")

    def full_eigh(shape):
        gram = linalg.upper_gram(tall(shape))
        return lambda: torch.linalg.eigh(gram, UPLO="U")

    def syrk(shape):
        x = tall(shape)
        return lambda: linalg.upper_gram(x)

    def best(fn, reps=3):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    with linalg.lapack_threads(cpu):
        one = {"Gram (syrk)": sum(best(syrk(s)) for s in shapes),
               "partial eigensolve (top r/T)": sum(best(per_task(s)) for s in shapes),
               "full eigensolve (r x r)": sum(best(full_eigh(s)) for s in shapes)}
    floors = {"iso_c / SB": one["Gram (syrk)"] + one["full eigensolve (r x r)"],
              "tsv_m": n_tasks * (one["Gram (syrk)"] + one["partial eigensolve (top r/T)"])
              + 2 * (one["Gram (syrk)"] + one["full eigensolve (r x r)"])}
    print(f"\nfloor of the exact route, {layers} layers x {len(shapes)} matrices, K = {n_tasks}, 1 BLAS thread "
          f"(task_arithmetic took {ta_seconds:.2f} s)")
    for name, seconds in one.items():
        print(f"  one {name} per matrix: {layers * seconds:.2f} s for the model")
    for name, seconds in floors.items():
        print(f"  {name}: at least {layers * seconds:.2f} s = {layers * seconds / ta_seconds:.1f}x task_arithmetic")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, nargs="+", default=[2, 6, 12])
    parser.add_argument("--methods", nargs="+", default=METHODS)
    parser.add_argument("--hidden", type=int, default=640)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "wildmerge-bench-models"))
    parser.add_argument("--kernels", action="store_true", help="also time kernels against the naive version")
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--floor", action="store_true", help="also time the exact route's unavoidable calls")
    parser.add_argument("--repeat", type=int, default=1, help="runs per merge; the median is printed")
    args = parser.parse_args()

    root = Path(args.workdir)
    root.mkdir(parents=True, exist_ok=True)
    base, experts, n_params = build_models(root, max(args.experts), args.hidden, args.layers)
    print(f"model: Llama, {n_params / 1e6:.1f}M parameters (bf16 on disk); torch threads: "
          f"{__import__('torch').get_num_threads()}; device: {'cuda' if args.cuda else 'cpu'}")
    for k in args.experts:
        print(f"\nK = {k} experts")
        print(f"{'method':16} {'wall s':>8} {'x TA':>7} {'peak RSS MiB':>13}")
        baseline = None
        time_merge(args.methods[0], base, experts[:k], args.cuda)  # warm-up: page cache, imports
        for method in args.methods:
            runs = [time_merge(method, base, experts[:k], args.cuda) for _ in range(args.repeat)]
            seconds, rss = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
            baseline = baseline or seconds
            print(f"{method:16} {seconds:8.2f} {seconds / baseline:7.2f} {rss:13.0f}", flush=True)
        if args.floor and not args.cuda:
            bench_floor(args.hidden, args.layers, k, baseline)
    if args.kernels:
        bench_kernels(args.hidden, 6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
