"""Wall time and peak RSS of the weight-metric pass (18 metrics, Zhou et al. arXiv 2601.22285) against one plain read
of the same checkpoints (the I/O floor), on a random Llama of >= 50M parameters and 12 noisy experts built locally.

Each measurement runs in its own process, so its peak RSS (VmHWM) is its own; the three run interleaved, round after
round (``paired.py``: ratios to the read within each round, median [min, max], LOADED figures marked), timed whole
and as the measured part alone (``measured``). The checkpoints are written once
in bfloat16 (the metric pass upcasts to float32 before subtracting). Reported: the plain read, the full pass (all
12 models new: reads, Gram entries, 672 SVDs), and the pass after adding one expert to a cached 11 (one model's SVDs
plus its 11 pairs' dot products).

    python benchmarks/bench_mergeability_weights.py [--rounds 5]    # CPU, single-threaded SVDs
    python benchmarks/bench_mergeability_weights.py --device cuda   # SVDs on the GPU
"""

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from paired import Process, measure, print_table, report_seconds

N_EXPERTS = 12


def build(root: Path) -> int:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    if (root / "done.json").is_file():
        return json.loads((root / "done.json").read_text())["params"]
    cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=6,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    n_params = sum(p.numel() for p in base.parameters())
    base.to(torch.bfloat16).save_pretrained(root / "base")
    state = {k: v.clone() for k, v in base.state_dict().items()}
    for i in range(N_EXPERTS):
        g = torch.Generator().manual_seed(i + 1)
        with torch.no_grad():
            for k, p in base.state_dict().items():
                p.copy_(state[k] + 0.01 * torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype))
        base.save_pretrained(root / f"expert_{i:02d}")
    (root / "done.json").write_text(json.dumps({"params": n_params}))
    return n_params


def child(args) -> None:
    """One measurement, reporting its measured part's time (``paired.report_seconds``)."""
    root = Path(args.root)
    experts = {f"expert_{i:02d}": str(root / f"expert_{i:02d}") for i in range(N_EXPERTS)}
    t = time.time()
    if args.child == "read":
        import torch
        from safetensors import safe_open

        total = 0.0
        for folder in [root / "base", *experts.values()]:
            for shard in sorted(Path(folder).glob("*.safetensors")):
                with safe_open(str(shard), framework="pt") as f:
                    for name in f.keys():
                        total += float(f.get_tensor(name).to(torch.float32).sum())  # touch every byte
    else:
        from wildmerge.analysis.mergeability.compute import MetricSettings, compute_metrics
        from wildmerge.analysis.mergeability.weights import WeightSettings

        settings = MetricSettings(groups=["weights"], weights=WeightSettings(device=args.device))
        if args.child == "add_one":
            subset = dict(list(experts.items())[:-1])
            compute_metrics(str(root / "base"), subset, settings=settings, cache_dir=args.cache, progress=False)
            t = time.time()
        compute_metrics(str(root / "base"), experts, settings=settings, cache_dir=args.cache, progress=False)
    report_seconds("measured", time.time() - t)


def run_child(args, kind: str, cache: Path) -> Process:
    """One measurement in a fresh process, its metric cache emptied before each run."""
    argv = [__file__, "--root", args.root, "--child", kind, "--cache", str(cache), "--device", args.device]
    return Process(argv, env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
                   before=lambda: shutil.rmtree(cache, ignore_errors=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default="/tmp/wildmerge-bench-mergeability")
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds after the warm-up (paired.py)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--cache", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    params = build(root)
    print(f"model: {params / 1e6:.1f}M parameters, {N_EXPERTS} experts + base (bfloat16 safetensors), "
          f"device {args.device}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}")
    cache = root / "cache"
    m = measure({"plain read (I/O floor)": run_child(args, "read", cache),
                 "weight pass, 12 new": run_child(args, "full", cache),
                 "add 1 expert to 11 cached": run_child(args, "add_one", cache)}, args.rounds, args.warmup)
    print_table(m, baseline="plain read (I/O floor)", keys=("wall", "measured"))


if __name__ == "__main__":
    main()
