"""Merge methods against mergekit's own ``task_arithmetic`` (TA) on the K = 12 anchor: every merge a stock
``mergekit-yaml`` in its own process, TA in the same run, ratios from interleaved pairs (``paired.py``).

The anchor is built once and cached in ``--workdir``: a Llama of 55.7M parameters (hidden 640, intermediate 1728,
10 layers, 10 heads / 5 KV heads, vocab 8000, untied head) in float32 safetensors, and K experts, each the base
plus Gaussian noise of standard deviation 0.01 (seeded). For each K in ``--experts`` (default 12) TA and the methods
(default: Iso-C, TA+SB, TSV-M, Iso-CTS) run in turn, round after round; the table gives each method's median time,
of the whole process and of mergekit's ``run_merge`` alone (the process without the interpreter's start and the
imports), its ratio to TA (median of the per-round ratios, with min and max), its peak RSS (the merge process's own
VmHWM) and the load of other processes (figures taken under more than half a core of it are printed LOADED).
With ``--fusionbench PATH`` (a folder FusionBench is installed into, outside the repository: see
benchmarks/README.md) the run also times FusionBench's own Iso-C, TSV-M and Iso-CTS (those of ``--methods``) in the
same paired measurement, rows ``fusionbench:NAME``: each a fresh process (``fusionbench_merge.py``) that loads the
base and the experts, merges with FusionBench's functions on FusionBench's defaults (scaling factor / alpha 1.0,
Iso-CTS common_space_fraction 0.8, vocabulary matrices excluded as ours are) and writes a safetensors checkpoint; its
``run_merge`` is the load, the merge and the save, as mergekit's. Without it those rows are skipped with the reason
printed. ``--check`` merges once each way (K = the largest of ``--experts``) and prints how far FusionBench's merged
weights are from ours, instead of timing.

A method written ``name:float32`` runs with ``svd_precision: float32``, ``name:randomized`` with ``topk_solver:
randomized`` (the opt-in approximate routes; ``name:float32+randomized`` both). ``--kernels`` times the spectral
kernels against a straightforward implementation of the papers (full float32 SVDs, polar factors by SVD), in this
process, paired the same way; ``--floor`` times the exact route's unavoidable LAPACK / BLAS calls alone.
``--before CHECKOUT`` (a checkout of another revision: ``git worktree add CHECKOUT REV``) adds each method run with
that revision's wildmerge, rows ``NAME (before)``, in the same rounds: a change's speed-up as a paired ratio.

    python benchmarks/bench_merge_methods.py [--experts 12] [--methods iso_c ta_sb tsv_m iso_cts] [--rounds 5]
        [--fusionbench PATH [--check]] [--before CHECKOUT]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import fusionbench_merge
from paired import Call, Process, measure, print_table, ratio_text

METHODS = ["iso_c", "ta_sb", "tsv_m", "iso_cts"]  # the four spectral methods; any shipped recipe name works
ANCHOR = {"vocab_size": 8000, "num_attention_heads": 10, "num_key_value_heads": 5, "tie_word_embeddings": False}
NOISE = 0.01


# ---------------------------------------------------------------- the anchor


def build_anchor(root: Path, n_experts: int, hidden: int, layers: int):
    """The base and ``n_experts`` experts under ``root`` (kept; rebuilt if its spec differs)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, LlamaConfig

    spec = {**ANCHOR, "hidden_size": hidden, "intermediate_size": round(hidden * 2.7), "num_hidden_layers": layers,
            "noise": NOISE, "dtype": "float32"}
    stamp = root / "anchor.json"
    if stamp.exists() and json.loads(stamp.read_text()) != spec:
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    base_dir = root / "base"
    if not (base_dir / "config.json").exists():
        torch.manual_seed(0)
        cfg = LlamaConfig(**{k: v for k, v in spec.items() if k not in ("noise", "dtype")})
        AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(base_dir)
        stamp.write_text(json.dumps(spec))
    state = None
    for i in range(n_experts):
        out = root / f"expert{i:02d}"
        if (out / "model.safetensors").exists():
            continue
        if state is None:
            state = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).state_dict()
        gen = torch.Generator().manual_seed(1 + i)
        out.mkdir(exist_ok=True)
        save_file({k: (v + NOISE * torch.randn(v.shape, generator=gen)).contiguous() for k, v in state.items()},
                  out / "model.safetensors", metadata={"format": "pt"})
        (out / "config.json").write_text((base_dir / "config.json").read_text())
    n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(base_dir).parameters())
    return str(base_dir), [str(root / f"expert{i:02d}") for i in range(n_experts)], n_params


# ---------------------------------------------------------------- merges through stock mergekit-yaml


def recipe(method: str, base: str, experts: list) -> dict:
    if method == "task_arithmetic":  # mergekit's own, plain: the baseline
        return {"merge_method": "task_arithmetic", "base_model": base, "dtype": "float32",
                "models": [{"model": e, "parameters": {"weight": 1.0}} for e in experts]}
    from wildmerge.recipes.render import render_recipe

    name, _, variant = method.partition(":")
    return render_recipe(name, base, experts, variant_overrides(variant))


def variant_overrides(variant):
    """``float32`` / ``randomized`` / ``float32+randomized`` as recipe parameters."""
    known = {"float32": ("svd_precision", "float32"), "randomized": ("topk_solver", "randomized")}
    parts = [v for v in variant.split("+") if v]
    unknown = [v for v in parts if v not in known]
    if unknown:
        raise SystemExit(f"unknown variant {unknown[0]!r}: use float32, randomized or float32+randomized")
    return dict(known[v] for v in parts) or None


def merge_process(method: str, base: str, experts: list, work: Path, cuda: bool,
                  code: Optional[str] = None) -> Process:
    """``mergekit-yaml RECIPE OUT`` for ``method``, its output folder emptied before each run; with ``code`` (a
    checkout of another wildmerge revision), that checkout's wildmerge is the one mergekit loads."""
    import yaml

    slug = method.replace(":", "-").replace("+", "-") + ("-before" if code else "")
    path = work / f"{slug}-k{len(experts)}.yml"
    path.write_text(yaml.safe_dump(recipe(method, base, experts)))
    out = work / f"out-{slug}"
    mergekit_yaml = shutil.which("mergekit-yaml") or str(Path(sys.executable).with_name("mergekit-yaml"))
    return Process([mergekit_yaml, str(path), str(out), *(["--cuda"] if cuda else [])],
                   env={"PYTHONPATH": str(Path(code).resolve())} if code else None,
                   before=lambda: shutil.rmtree(out, ignore_errors=True), time_call="mergekit.merge:run_merge")


# ---------------------------------------------------------------- FusionBench's implementations of the same methods


def fusionbench_process(folder, method: str, base: str, experts: list, work: Path, cuda: bool) -> Process:
    """``fusionbench_merge.py`` for ``method``: load, merge with FusionBench's functions, save; output emptied first."""
    out = work / f"out-fusionbench-{method}"
    script = str(Path(__file__).resolve().with_name("fusionbench_merge.py"))
    return Process([script, "--fusionbench", str(folder), "--method", method, "--out", str(out),
                    *(["--cuda"] if cuda else []), base, *experts],
                   before=lambda: shutil.rmtree(out, ignore_errors=True))


def fusionbench_methods(folder, methods: list) -> list:
    """The methods of ``methods`` FusionBench also has (plain names only), or none with the reason printed."""
    shared = [m for m in methods if m in fusionbench_merge.METHODS]
    reason = fusionbench_merge.missing(folder) or ("" if shared else "none of --methods is iso_c, tsv_m or iso_cts")
    if reason:
        print(f"# FusionBench rows skipped: {reason}")
        return []
    return shared


def read_checkpoint(folder: Path) -> dict:
    from safetensors.torch import load_file

    state = {}
    for path in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(path)))
    return state


def check_fusionbench(folder, methods: list, base: str, experts: list, work: Path, cuda: bool) -> None:
    """Merge once with ours (mergekit-yaml) and once with FusionBench's functions; print how far apart they are:
    the largest absolute difference of any weight, and ||ours - theirs||_F / ||ours - base||_F over the merged
    update (float64), for the spectral matrices and for the rest."""
    import torch

    base_state = read_checkpoint(Path(base))
    print(f"## FusionBench against ours, K = {len(experts)}: each merged once (float32 checkpoints)")
    print("| method | part | tensors | max abs difference | relative difference of the update |")
    print("|---|---|---|---|---|")
    for method in methods:
        for proc in (merge_process(method, base, experts, work, cuda),
                     fusionbench_process(folder, method, base, experts, work, cuda)):
            proc()
        ours = read_checkpoint(work / f"out-{method}")
        theirs = read_checkpoint(work / f"out-fusionbench-{method}")
        if set(ours) != set(theirs):
            raise SystemExit(f"{method}: the checkpoints differ in tensor names: {sorted(set(ours) ^ set(theirs))}")
        vocab = set(fusionbench_merge.vocab_keys(base_state, json.loads((Path(base) / "config.json").read_text())))
        parts = {"spectral matrices": [k for k in ours if ours[k].dim() == 2 and k not in vocab],
                 "vocabulary matrices and 1-D": [k for k in ours if ours[k].dim() != 2 or k in vocab]}
        for part, keys in parts.items():
            diff = max(float((ours[k].double() - theirs[k].double()).abs().max()) for k in keys)
            num = sum(float(torch.sum((ours[k].double() - theirs[k].double()) ** 2)) for k in keys)
            den = sum(float(torch.sum((ours[k].double() - base_state[k].double()) ** 2)) for k in keys)
            print(f"| {method} | {part} | {len(keys)} | {diff:.3g} | {(num / den) ** 0.5:.3g} |")


# ---------------------------------------------------------------- kernels and the exact route's floor


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


def bench_kernels(hidden, n_tasks, rounds, warmup):
    """Our kernels (default thread policy) against the naive ones on one thread and on torch's threads."""
    import torch

    from wildmerge.plugins import spectral
    from wildmerge.threads import blas_threads
    from wildmerge.plugins.methods import IsoCParams, TaskArithmeticSBParams, TSVMParams

    boost = TaskArithmeticSBParams.with_defaults(spectral.subspace_boost)
    ours = {"tsv_m": TSVMParams.with_defaults(spectral.tsv_m), "iso_c": IsoCParams.with_defaults(spectral.iso_c),
            "boost": lambda ds: boost(sum(ds), 0.2)}
    naive = naive_kernels()
    shapes = [(hidden, hidden), (round(hidden * 2.7), hidden)]
    inputs = [[torch.randn(*s) for _ in range(n_tasks)] for s in shapes]

    def run(fn, threads=None):
        def call():
            if threads is None:
                for ds in inputs:
                    fn(ds)
                return
            with blas_threads(threads):
                for ds in inputs:
                    fn(ds)
        return Call(call)

    for name in ours:
        m = measure({"ours": run(ours[name]), "naive, 1 thread": run(naive[name], 1),
                     "naive, torch's threads": run(naive[name])}, rounds, warmup)
        print_table(m, baseline="ours",
                    title=f"## kernel {name}: {n_tasks} task vectors of {shapes} (ratio: case / ours)")


def bench_floor(hidden, layers, n_tasks):
    """The exact kernels' unavoidable LAPACK/BLAS calls over the benchmark model's matrices, timed alone on one
    thread (best of 3; the full eigensolve also as torch's ``eigh``, which the route called before scipy's syevd).

    Per matrix (r = min(m, n), k = r / T): TSV-M needs T Gram matrices (syrk) and T partial eigensolves (top k)
    for the per-task triplets, then two r x r eigensolves for the polar factors; Iso-C and Subspace Boosting one
    Gram and one full eigensolve. Whatever else a kernel does comes on top: this is the floor of the exact route.
    Side by side on c free cores, TSV-M's per-task part divides by up to c.
    """
    import torch

    from wildmerge.plugins import lapack, linalg
    from wildmerge.threads import blas_threads

    inter = round(hidden * 2.7)
    shapes = [(hidden, hidden), (hidden // 2, hidden), (hidden // 2, hidden), (hidden, hidden),
              (inter, hidden), (inter, hidden), (hidden, inter)]  # q, k, v, o, gate, up, down

    def tall(shape):
        return torch.randn(max(shape), min(shape), dtype=torch.float64)

    def per_task(shape):
        k = max(1, min(shape) // n_tasks)
        gram = linalg.upper_gram(tall(shape))
        return lambda: lapack.syevr_top(gram, k) if 4 * k <= min(shape) else linalg.eigh_upper(gram)

    def full_eigh(shape, solver=linalg.eigh_upper):
        gram = linalg.upper_gram(tall(shape))
        return lambda: solver(gram)

    def torch_eigh(gram):
        return torch.linalg.eigh(gram, UPLO="U")

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

    with blas_threads(1):
        one = {"Gram (syrk)": sum(best(syrk(s)) for s in shapes),
               "partial eigensolve (top r/T)": sum(best(per_task(s)) for s in shapes),
               "full eigensolve (r x r)": sum(best(full_eigh(s)) for s in shapes),
               "full eigensolve by torch's eigh (the route before scipy's syevd)":
                   sum(best(full_eigh(s, torch_eigh)) for s in shapes)}
    floors = {"iso_c / SB": one["Gram (syrk)"] + one["full eigensolve (r x r)"],
              "tsv_m, per-task part": n_tasks * (one["Gram (syrk)"] + one["partial eigensolve (top r/T)"]),
              "tsv_m, polar part": 2 * (one["Gram (syrk)"] + one["full eigensolve (r x r)"])}
    print(f"\n## floor of the exact route, {layers} layers x {len(shapes)} matrices, K = {n_tasks}, one thread, "
          f"best of 3 (load average {os.getloadavg()[0]:.2f}: seconds, compare with TA's median above)")
    for name, seconds in one.items():
        print(f"  one {name} per matrix: {layers * seconds:.2f} s for the model")
    for name, seconds in floors.items():
        print(f"  {name}: at least {layers * seconds:.2f} s on one thread")


# ---------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, nargs="+", default=[12])
    parser.add_argument("--methods", nargs="+", default=METHODS)
    parser.add_argument("--hidden", type=int, default=640)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "wildmerge-bench-anchor"),
                        help="where the anchor is kept between runs (and merges are written)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (at least 5 for a figure)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--kernels", action="store_true", help="also time kernels against the naive version")
    parser.add_argument("--floor", action="store_true", help="also time the exact route's unavoidable calls")
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--json", help="write every run (times, peak RSS, load samples) to this file")
    parser.add_argument("--fusionbench", metavar="PATH",
                        help="folder FusionBench is installed into: adds its iso_c / tsv_m / iso_cts rows")
    parser.add_argument("--before", metavar="CHECKOUT",
                        help="a checkout of another wildmerge revision (git worktree add CHECKOUT REV): adds each "
                             "method run with that code, as 'METHOD (before)', in the same rounds")
    parser.add_argument("--check", action="store_true",
                        help="with --fusionbench: compare FusionBench's merged weights with ours once, no timing")
    args = parser.parse_args()

    if args.before and not (Path(args.before) / "wildmerge" / "__init__.py").exists():
        parser.error(f"--before {args.before}: no wildmerge package there; make one with "
                     f"`git worktree add {args.before} REV`")
    theirs = fusionbench_methods(args.fusionbench, args.methods)
    if args.check and not theirs:
        parser.error("--check compares FusionBench's merges with ours: give --fusionbench PATH (its install folder) "
                     "and at least one of iso_c, tsv_m, iso_cts in --methods")
    root = Path(args.workdir)
    base, experts, n_params = build_anchor(root, max(args.experts), args.hidden, args.layers)
    work = root / "merges"
    work.mkdir(exist_ok=True)
    print(f"# model: Llama, {n_params / 1e6:.1f}M parameters, float32 on disk ({root}); "
          f"device: {'cuda' if args.cuda else 'cpu'}; every merge a stock mergekit-yaml process")
    if args.check:
        try:
            check_fusionbench(args.fusionbench, theirs, base, experts, work, args.cuda)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    results = {}
    try:
        for k in args.experts:
            cases = {method: merge_process(method, base, experts[:k], work, args.cuda)
                     for method in ["task_arithmetic", *args.methods]}
            if args.before:
                cases.update({f"{method} (before)": merge_process(method, base, experts[:k], work, args.cuda,
                                                                  args.before) for method in args.methods})
            cases.update({f"fusionbench:{method}": fusionbench_process(args.fusionbench, method, base, experts[:k],
                                                                       work, args.cuda) for method in theirs})
            m = measure(cases, args.rounds, args.warmup)
            print_table(m, baseline="task_arithmetic", keys=("wall", "run_merge"),
                        title=f"## K = {k} experts: the whole mergekit-yaml process (wall) and its merge alone "
                              f"(run_merge: without the interpreter's start and the imports)")
            pairs = [(method, f"{method} (before)") for method in args.methods if args.before]
            pairs += [(method, f"fusionbench:{method}") for method in theirs]
            for ours, other in pairs:
                print(f"  {ours} / {other}: process {ratio_text(m, ours, other)}, "
                      f"run_merge {ratio_text(m, ours, other, 'run_merge')}")
            results[f"K={k}"] = m.as_dict()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.floor and not args.cuda:
        bench_floor(args.hidden, args.layers, max(args.experts))
    if args.kernels:
        bench_kernels(args.hidden, 6, args.rounds, args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
