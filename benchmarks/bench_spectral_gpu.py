"""Spectral merges on a GPU: exactness against float64, kernel times before / after, and every method against
mergekit's task_arithmetic on the shapes of a real Qwen3-4B layer, all in one run.

Three parts, each printed as a markdown table and written under ``--out`` as it finishes:
1. exactness: our kernels on the device against the float64 references of tests/plugins/test_spectral_kernels.py (numpy
   SVDs on the CPU), on full-rank and rank-deficient inputs, for the default (float64) and opt-in float32 routes;
2. methods: a Qwen3 model with Qwen3-4B's layer shapes (hidden 2560, intermediate 9728, q 4096, k/v 1024) and
   ``--layers`` layers, K noisy experts, each method merged by mergekit's ``run_merge`` in this process, with the
   wall time, its ratio to ``task_arithmetic`` (run first and last, ratio to the mean of both), peak GPU memory
   (``torch.cuda.max_memory_allocated``) and peak RSS (VmHWM, reset before each merge);
3. kernels: one 2560 x 2560 and one 9728 x 2560 matrix, K task vectors: the linear-algebra calls and the kernels
   before (``--before``: a spectral.py from before the linalg.py split) and after.

The default top-k route of TSV-M and Iso-CTS (``topk_solver: auto``: on a GPU randomized batched across tasks, one
(T, m, n) GEMM chain) is measured beside the exact route and the per-task randomized one, with their numerics against
each other; each K ends with the default settings' ratio to TA against the targets (TSV-M <= 2x, Iso-CTS <= 2.5x).

    python benchmarks/bench_spectral_gpu.py --out results/ [--before old_spectral.py]
    python benchmarks/bench_spectral_gpu.py --device cpu --small --out /tmp/rehearsal   # CPU rehearsal
"""

import argparse
import gc
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from paired import Call, measure, ratio_text

from wildmerge.plugins import spectral as kernels
from wildmerge.plugins.methods import IsoCParams, IsoCTSParams, TaskArithmeticSBParams, TSVMParams

# the kernels as their methods call them: the declared defaults for every keyword a call leaves out
spectral = SimpleNamespace(iso_c=IsoCParams.with_defaults(kernels.iso_c),
                           iso_cts=IsoCTSParams.with_defaults(kernels.iso_cts),
                           tsv_m=TSVMParams.with_defaults(kernels.tsv_m),
                           subspace_boost=TaskArithmeticSBParams.with_defaults(kernels.subspace_boost))

ROOT = Path(__file__).resolve().parents[1]
METHODS = ["iso_c", "ta_sb", "tsv_m", "iso_cts"]


class Report:
    """Prints each line and appends it to OUT/results.md, so a run cut short still leaves what it measured."""

    def __init__(self, out: Path):
        self.path = out / "results.md"
        self.rows = []
        out.mkdir(parents=True, exist_ok=True)

    def __call__(self, line: str = ""):
        print(line, flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")

    def record(self, **row):
        self.rows.append(row)
        (self.path.parent / "results.json").write_text(json.dumps(self.rows, indent=1))


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, reps=3):
    """Median wall seconds of ``reps`` calls (after synchronising), and the last result."""
    times, result = [], None
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        result = fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


# ---------------------------------------------------------------- 1. exactness


def rel_err(ours, ref):
    ours = ours.detach().double().cpu().numpy()
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))


def exactness(report, refs, device, shapes, n_tasks, rank):
    report(f"\n## Exactness on {device_name(device)} (K = {n_tasks}; max abs error / max abs of the float64 reference)")
    report("\n| input | kernel | float64 (default) | float32 (opt-in) | rank kept |")
    report("|---|---|---:|---:|---|")
    g = torch.Generator().manual_seed(0)
    for shape in shapes:
        for r in (None, rank):
            if r is None:
                mats = [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(n_tasks)]
            else:
                mats = [torch.randn(shape[0], r, generator=g, dtype=torch.float64)
                        @ torch.randn(r, shape[1], generator=g, dtype=torch.float64) for _ in range(n_tasks)]
            deltas = [m.to(torch.float32) for m in mats]  # what the methods pass: float32 task vectors
            ref_in = [d.double().numpy() for d in deltas]
            on_dev = [d.to(device) for d in deltas]
            total = sum(on_dev)
            cases = {
                "iso_c": (lambda p: spectral.iso_c(on_dev, svd_precision=p), lambda: refs.ref_iso_c(ref_in)),
                "subspace_boost": (lambda p: total.double() + spectral.subspace_boost(total, 0.2, svd_precision=p),
                                   lambda: refs.ref_boost(sum(ref_in), 0.2)),
                "tsv_m": (lambda p: spectral.tsv_m(on_dev, svd_precision=p), lambda: refs.ref_tsv(ref_in)),
                "iso_cts": (lambda p: spectral.iso_cts(on_dev, 0.8, svd_precision=p),
                            lambda: refs.ref_iso_cts(ref_in, 0.8)),
            }
            label = f"{shape[0]}x{shape[1]} {'full' if r is None else f'rank {r} per task'}"
            for name, (ours, ref_fn) in cases.items():
                ref = ref_fn()
                e64, e32 = rel_err(ours("float64"), ref), rel_err(ours("float32"), ref)
                kept = "-"
                if r is not None and name in ("iso_c", "subspace_boost"):
                    want = min(r * n_tasks, min(shape))
                    got = int(torch.linalg.matrix_rank(ours("float64").double().cpu(), rtol=1e-6))
                    kept = f"{got} of {want}" + ("" if got == want else " (WRONG)")
                verdict = "" if e64 <= 1e-4 else " FAIL"
                report(f"| {label} | {name} | {e64:.1e}{verdict} | {e32:.1e} | {kept} |")
                report.record(part="exactness", input=label, kernel=name, err64=e64, err32=e32, rank=kept)


def batched_numerics(report, device, shape, n_tasks):
    """The batched randomized top-k on the device against the per-task loop (same seeded sketch: should agree to
    rounding) and against the exact route (approximate: differs by what the sketch misses)."""
    g = torch.Generator().manual_seed(3)
    deltas = [torch.randn(*shape, generator=g).to(device) for _ in range(n_tasks)]
    report(f"\n## Batched randomized top-k on {device_name(device)}: {n_tasks} x {shape[0]}x{shape[1]} float32, "
           "relative Frobenius difference of the merged update")
    report("\n| kernel | batched vs per-task loop | batched vs exact |")
    report("|---|---:|---:|")
    for name, f in (("tsv_m", spectral.tsv_m), ("iso_cts", lambda ds, **kw: spectral.iso_cts(ds, 0.8, **kw))):
        batched, loop, exact = (f(deltas, topk_solver=t).double() for t in ("randomized_batched", "randomized", "exact"))
        d_loop = float((batched - loop).norm() / loop.norm())
        d_exact = float((batched - exact).norm() / exact.norm())
        report(f"| {name} | {d_loop:.1e} | {d_exact:.1e} |")
        report.record(part="batched", kernel=name, vs_loop=d_loop, vs_exact=d_exact)


# ---------------------------------------------------------------- 2. methods through mergekit


def build_models(root: Path, n_experts: int, args, device):
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, Qwen3Config

    base_dir = root / "base"
    cfg = Qwen3Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                      head_dim=args.head_dim, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(base_dir)
    state = {k: v.to(device) for k, v in model.state_dict().items()}
    n_params = sum(v.numel() for v in state.values())
    g = torch.Generator(device=device).manual_seed(1)
    for i in range(n_experts):
        out = root / f"expert{i:02d}"
        out.mkdir()
        expert = {k: (v.float() + 0.01 * torch.randn(v.shape, generator=g, device=device)).to(torch.bfloat16).cpu()
                  for k, v in state.items()}
        save_file(expert, out / "model.safetensors", metadata={"format": "pt"})
        (out / "config.json").write_text((base_dir / "config.json").read_text())
    shapes = sorted({tuple(v.shape) for k, v in state.items() if v.ndim == 2 and "embed" not in k and "lm_head" not in k})
    return str(base_dir), [str(root / f"expert{i:02d}") for i in range(n_experts)], n_params, shapes


def reset_peak_rss():
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        pass


def peak_rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def merge_once(method, base, experts, device, overrides=None):
    import yaml
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    from wildmerge.recipes.render import render_recipe

    if method == "task_arithmetic":  # mergekit's own, plain: the baseline
        config = {"merge_method": "task_arithmetic", "base_model": base, "dtype": "float32", "out_dtype": "bfloat16",
                  "models": [{"model": e, "parameters": {"weight": 1.0}} for e in experts]}
    else:
        config = render_recipe(method, base, experts, overrides)
    options = MergeOptions(copy_tokenizer=False, quiet=True, cuda=device.type == "cuda", write_model_card=False)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    reset_peak_rss()
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        run_merge(MergeConfiguration.model_validate(config), out, options=options, config_source=yaml.safe_dump(config))
        sync(device)
        seconds = time.perf_counter() - start
    gpu = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else float("nan")
    return seconds, gpu, peak_rss_mib()


def methods_table(report, args, device, root: Path):
    """Every method through mergekit, paired with TA (``paired.py``: rounds of every case once, interleaved; the
    median of the per-round ratios to TA with min and max), with each case's largest peak GPU memory and RSS."""
    start = time.perf_counter()
    base, experts, n_params, shapes = build_models(root, max(args.experts), args, device)
    report(f"\n## Methods on {device_name(device)}: Qwen3, {args.layers} layers, {n_params / 1e6:.1f}M parameters "
           f"(bf16 on disk), matrices {shapes}; built in {time.perf_counter() - start:.0f} s")
    merge_once("task_arithmetic", base, experts[:2], device)  # warm-up: CUDA context, page cache, imports
    merge_once("iso_c", base, experts[:2], device)
    variants = [(m, None) for m in METHODS] + [(m, {"svd_precision": "float32"}) for m in args.float32_methods]
    variants += [(m, {"topk_solver": t}) for t in args.routes for m in ("tsv_m", "iso_cts")]
    for k in args.experts:
        peaks = {}

        def case(method, overrides, label):
            def run():
                _, gpu, rss = merge_once(method, base, experts[:k], device, overrides)
                peaks.setdefault(label, []).append((gpu, rss))
            return Call(run)

        cases = {"task_arithmetic": case("task_arithmetic", None, "task_arithmetic")}
        for method, overrides in variants:
            if overrides and k != max(args.experts):
                continue
            label = method + (f" ({', '.join(overrides.values())})" if overrides else "")
            cases[label] = case(method, overrides, label)
        m = measure(cases, rounds=args.rounds, warmup=1)
        report(f"\n### K = {k}: {m.rounds} interleaved rounds after a warm-up; load before {m.before.text()}, "
               f"after {m.after.text()}\n")
        report("| method | median wall s | x task_arithmetic, median [min, max] | peak GPU MiB | x TA | "
               "peak RSS MiB | x TA |")
        report("|---|---:|---|---:|---:|---:|---:|")
        ta_gpu, ta_rss = (max(p[i] for p in peaks["task_arithmetic"]) for i in (0, 1))
        ratios = {}
        for label in cases:
            gpu, rss = (max(p[i] for p in peaks[label]) for i in (0, 1))
            ratio = "1.00x" if label == "task_arithmetic" else ratio_text(m, label, "task_arithmetic")
            values = m.ratios(label, "task_arithmetic")
            ratios[label] = statistics.median(values) if values and not m.loaded(label, "task_arithmetic") else None
            report(f"| {label} | {m.median(label):.2f} | {ratio} | {gpu:.0f} | {gpu / ta_gpu:.2f} | "
                   f"{rss:.0f} | {rss / ta_rss:.2f} |")
            report.record(part="methods", k=k, method=label, seconds=m.median(label), ratio=ratios[label],
                          ratios=values, gpu_mib=gpu, rss_mib=rss, loaded=m.loaded(label, "task_arithmetic"))
        targets(report, k, ratios)


TARGETS = {"tsv_m": 2.0, "iso_cts": 2.5}  # x task_arithmetic on a GPU


def targets(report, k, ratios):
    """TSV-M and Iso-CTS with the default settings (``topk_solver: auto``) against their target ratio to TA."""
    for method, target in TARGETS.items():
        if ratios.get(method) is not None:
            ratio = ratios[method]
            verdict = "met" if ratio <= target else "NOT met"
            report(f"- K = {k}: {method} (default settings) {ratio:.2f}x TA; target <= {target}x: {verdict}")
            report.record(part="targets", k=k, method=method, route="default", ratio=ratio, target=target)


# ---------------------------------------------------------------- 3. kernels before / after


def kernels_table(report, device, shapes, n_tasks, before):
    report(f"\n## Kernels on {device_name(device)}: K = {n_tasks} float32 task vectors; median of 3 "
           "(1 run where marked *), ms")
    report("\n| call | " + " | ".join(f"{m}x{n}" for m, n in shapes) + " |")
    report("|---|" + "---:|" * len(shapes))
    g = torch.Generator(device=device).manual_seed(2)
    data = [[torch.randn(*s, generator=g, device=device) for _ in range(n_tasks)] for s in shapes]
    r = min(shapes[0])

    def gram_eigh(dtype):
        def run(ds):
            x = sum(ds).to(dtype)
            return torch.linalg.eigh(x.T @ x if x.shape[0] >= x.shape[1] else x @ x.T)
        return run

    def batched_gram_eigh(dtype):
        def run(ds):
            grams = torch.stack([d.to(dtype).T @ d.to(dtype) if d.shape[0] >= d.shape[1] else
                                 d.to(dtype) @ d.to(dtype).T for d in ds])
            return torch.linalg.eigh(grams)
        return run

    def streamed_gram_eigh(dtype, n_streams):
        """Does cuSOLVER overlap independent eigensolves? One per stream, no host sync (eigh_ex)."""
        streams = [torch.cuda.Stream() for _ in range(n_streams)]

        def run(ds):
            main, out = torch.cuda.current_stream(), []
            for i, d in enumerate(ds):
                stream = streams[i % n_streams]
                stream.wait_stream(main)
                with torch.cuda.stream(stream):
                    x = d.to(dtype)
                    out.append(torch.linalg.eigh_ex(x.T @ x if x.shape[0] >= x.shape[1] else x @ x.T))
            for stream in streams:
                main.wait_stream(stream)
            return out
        return run

    rows = []
    slow = device.type == "cpu"
    rows.append(("torch.linalg.svd, default driver, 1 matrix", lambda ds: torch.linalg.svd(sum(ds), full_matrices=False), 3))
    if device.type == "cuda":
        rows.append(("torch.linalg.svd, gesvda, 1 matrix",
                     lambda ds: torch.linalg.svd(sum(ds), full_matrices=False, driver="gesvda"), 3))
    rows += [("Gram + eigh float32, 1 matrix", gram_eigh(torch.float32), 3),
             ("Gram + eigh float64, 1 matrix", gram_eigh(torch.float64), 3)]
    if before is not None:
        rows.append((f"{n_tasks} per-task SVDs, batched, default driver *",
                     lambda ds: torch.linalg.svd(torch.stack(ds), full_matrices=False), 1))
    if device.type == "cuda":
        rows.append((f"{n_tasks} Gram + eigh float64, one at a time", lambda ds: [gram_eigh(torch.float64)([d]) for d in ds], 3))
        rows.append((f"{n_tasks} Gram + eigh float64, on 4 CUDA streams", streamed_gram_eigh(torch.float64, 4), 3))
    rows += [(f"{n_tasks} Gram + eigh float32, batched", batched_gram_eigh(torch.float32), 3),
             (f"{n_tasks} Gram + eigh float64, batched", batched_gram_eigh(torch.float64), 3),
             (f"{n_tasks} torch.svd_lowrank, q = r/K + 8", lambda ds: [torch.svd_lowrank(d, q=r // n_tasks + 8)
                                                                      for d in ds], 3)]
    kernels = {  # name: (the call in a --before spectral.py, which has the names it had before the split; ours)
        "iso_c": (lambda mod, ds: mod.isotropic(sum(ds)), spectral.iso_c),
        "subspace_boost": (lambda mod, ds: mod.subspace_boost(sum(ds), 0.2),
                           lambda ds, **kw: spectral.subspace_boost(sum(ds), 0.2, **kw)),
        "tsv_m": (lambda mod, ds: mod.tsv_merge(ds), spectral.tsv_m),
        "iso_cts": (lambda mod, ds: mod.iso_cts(ds, 0.8), lambda ds, **kw: spectral.iso_cts(ds, 0.8, **kw)),
    }
    for name, (old, ours) in kernels.items():
        heavy = name in ("tsv_m", "iso_cts")
        if before is not None:
            rows.append((f"before: {name}{' *' if heavy else ''}", lambda ds, old=old: old(before, ds),
                         1 if heavy else 3))
        rows.append((f"after: {name} (float64, default)", lambda ds, f=ours: f(ds, svd_precision="float64"), 3))
        rows.append((f"after: {name} (float32, opt-in)", lambda ds, f=ours: f(ds, svd_precision="float32"), 3))
        if heavy:
            rows.append((f"after: {name} (randomized top-k, opt-in)",
                         lambda ds, f=ours: f(ds, topk_solver="randomized"), 3))
            rows.append((f"after: {name} (randomized top-k batched across tasks, opt-in)",
                         lambda ds, f=ours: f(ds, topk_solver="randomized_batched"), 3))
    for label, fn, reps in rows:
        try:
            fn(data[0][:2])  # warm-up: handles, workspaces
            times = [timed(lambda ds=ds: fn(ds), device, 1 if slow else reps)[0] for ds in data]
        except Exception as exc:  # one broken row must not lose the others
            report(f"| {label} | failed: {type(exc).__name__}: {exc} |")
            continue
        report(f"| {label} | " + " | ".join(f"{1000 * t:.0f}" for t in times) + " |")
        report.record(part="kernels", call=label, ms=[1000 * t for t in times])


def device_name(device):
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__})"
    return f"CPU, {torch.get_num_threads()} threads (torch {torch.__version__})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-spectral-gpu")
    parser.add_argument("--before", default=None, help="path of the previous spectral.py, for the 'before' rows")
    parser.add_argument("--refs", default=str(ROOT / "tests" / "plugins" / "test_spectral_kernels.py"),
                        help="the float64 references (the kernel tests)")
    parser.add_argument("--parts", nargs="+", default=["exactness", "methods", "kernels"])
    parser.add_argument("--experts", type=int, nargs="+", default=[2, 6, 12])
    parser.add_argument("--float32-methods", nargs="*", default=METHODS, help="also run these with svd_precision float32 at the largest K")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the methods part (paired.py)")
    parser.add_argument("--routes", nargs="*", default=["exact", "randomized"],
                        help="TSV-M's and Iso-CTS's top-k routes measured beside the default (topk_solver: auto)")
    parser.add_argument("--small", action="store_true", help="tiny shapes (the CPU rehearsal: --device cpu --small)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="default: cuda when available (and not --small)")
    args = parser.parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() and not args.small else "cpu"))
    if args.small:
        dims = dict(hidden=128, intermediate=486, heads=4, kv_heads=2, head_dim=32, vocab=512)
        exact_shapes, kernel_shapes, rank = [(96, 256), (256, 96), (64, 64)], [(128, 128), (486, 128)], 8
    else:
        dims = dict(hidden=2560, intermediate=9728, heads=32, kv_heads=8, head_dim=128, vocab=8192)
        exact_shapes, kernel_shapes, rank = [(2560, 1024), (1024, 2560), (768, 768)], [(2560, 2560), (9728, 2560)], 32
    for key, value in dims.items():
        setattr(args, key, value)
    out = Path(args.out)
    report = Report(out)
    report(f"# bench_spectral_gpu on {device_name(device)}; kernels from {kernels.__file__}; args {vars(args)}")
    before = load_module("spectral_before", Path(args.before)) if args.before else None
    if "exactness" in args.parts:
        exactness(report, load_module("spectral_refs", Path(args.refs)), device, exact_shapes, 6, rank)
    if "exactness" in args.parts:
        batched_numerics(report, device, exact_shapes[0], 6)
    if "methods" in args.parts:
        with tempfile.TemporaryDirectory() as root:
            methods_table(report, args, device, Path(root))
    if "kernels" in args.parts:
        kernels_table(report, device, kernel_shapes, max(args.experts), before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
