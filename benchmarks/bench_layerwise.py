"""Wall time and peak RSS of RegMean and Chain of Merges against a plain task_arithmetic merge of the same inputs.

A random Llama of >= 50M parameters is built locally (no hub) with up to 12 noisy experts and per-expert token
data. Each merge runs in its own process so its peak RSS is its own; for each expert count TA and the layer-wise
merges run interleaved, round after round (``paired.py``: ratios to TA within each round, median [min, max], the
load of other processes, LOADED figures marked), timed whole and as mergekit's ``run_merge`` alone. Points: 2, 6,
12 experts at the middle sample count, and 16, 64, 256 samples per expert at 6 experts (the grid's two axes;
``--grid`` runs all pairs).

    python benchmarks/bench_layerwise.py [--rounds 5]         # CPU, seq_len 32
    python benchmarks/bench_layerwise.py --device cuda --dtype bfloat16 --seq-len 256 --grid
"""

import argparse
import json
import os
import random
import time
from pathlib import Path

from paired import Process, measure, print_table, report_seconds

EXPERTS = (2, 6, 12)
SAMPLES = (16, 64, 256)


def build(root: Path, n_experts: int, seq_len: int, dtype: str) -> None:
    """Base + experts (base + small noise) + one token file per expert, each from its own vocabulary slice."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    if (root / "done.json").is_file() and json.loads((root / "done.json").read_text()) == [n_experts, seq_len, dtype]:
        return
    cfg = LlamaConfig(vocab_size=40000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    n_params = sum(p.numel() for p in base.parameters())
    base.to(getattr(torch, dtype)).save_pretrained(root / "base")
    state = {k: v.clone() for k, v in base.state_dict().items()}
    for i in range(n_experts):
        with torch.no_grad():
            for k, p in base.state_dict().items():
                p.copy_(state[k] + 0.01 * torch.randn_like(state[k], dtype=torch.float32).to(p.dtype))
        base.save_pretrained(root / f"expert{i:02d}")
        rng, lo = random.Random(i), 1000 * i
        with open(root / f"data{i:02d}.jsonl", "w") as f:
            for _ in range(max(SAMPLES)):
                f.write(json.dumps({"input_ids": [rng.randrange(lo, lo + 5000) for _ in range(seq_len)]}) + "\n")
    (root / "params.txt").write_text(str(n_params))
    (root / "done.json").write_text(json.dumps([n_experts, seq_len, dtype]))


def recipe(root: Path, method: str, n_experts: int, n_samples: int, seq_len: int, diagnostics: bool) -> dict:
    experts = [str(root / f"expert{i:02d}") for i in range(n_experts)]
    if method == "task_arithmetic":
        return {"merge_method": "task_arithmetic", "base_model": str(root / "base"),
                "parameters": {"lambda": 1.0, "normalize": True},
                "models": [{"model": e, "parameters": {"weight": 1.0}} for e in experts]}
    return {"merge_method": method, "base_model": str(root / "base"),
            "parameters": {"diagnostics": diagnostics},
            "calibration": {"n_samples": n_samples, "seq_len": seq_len, "batch_size": 16},
            "models": [{"model": e, "calibration": str(root / f"data{i:02d}.jsonl")} for i, e in enumerate(experts)]}


def one(args) -> None:
    """Child process: one merge, reporting run_merge's own time (``paired.report_seconds``)."""
    import torch
    import yaml
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    torch.set_num_threads(args.threads)
    root = Path(args.root)
    r = recipe(root, args.method, args.experts, args.samples, args.seq_len, args.diagnostics)
    out = root / "out" / f"{args.method}_{args.experts}_{args.samples}"
    options = MergeOptions(device=args.device, cuda=args.device.startswith("cuda"), copy_tokenizer=False,
                           quiet=True, write_model_card=False)
    start = time.perf_counter()
    run_merge(MergeConfiguration.model_validate(r), str(out), options=options, config_source=yaml.safe_dump(r))
    report_seconds("run_merge", time.perf_counter() - start)


def child(args, method, n_experts, n_samples) -> Process:
    """One merge in a fresh process (its output folder replaced by mergekit each run)."""
    argv = [__file__, "--one", "--root", args.root, "--method", method, "--experts", str(n_experts),
            "--samples", str(n_samples), "--seq-len", str(args.seq_len), "--device", args.device,
            "--threads", str(args.threads)] + (["--diagnostics"] if args.diagnostics else [])
    return Process(argv, env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "wildmerge_bench_layerwise"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", help="checkpoint dtype (the forward passes run in it)")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--diagnostics", action="store_true", help="also compute the Eq. 8 covariate shift")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable timings on a shared box)")
    p.add_argument("--grid", action="store_true", help="every (experts, samples) pair, not just the two axes")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds after the warm-up (paired.py)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--experts", type=int, help=argparse.SUPPRESS)
    p.add_argument("--samples", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        return one(args)

    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    build(root, max(EXPERTS), args.seq_len, args.dtype)
    print(f"model: Llama, {int((root / 'params.txt').read_text()) / 1e6:.1f}M parameters, {args.dtype}; "
          f"device {args.device}; {args.threads} CPU thread(s); seq_len {args.seq_len}; diagnostics {'on' if args.diagnostics else 'off'}")
    points = [(e, s) for e in EXPERTS for s in SAMPLES] if args.grid else \
        [(e, SAMPLES[1]) for e in EXPERTS] + [(EXPERTS[1], s) for s in SAMPLES if s != SAMPLES[1]]
    results = {}
    for e in EXPERTS:
        cases = {"task_arithmetic": child(args, "task_arithmetic", e, 0)}
        for method in ("regmean", "chain_of_merges"):
            for s in (s for pe, s in points if pe == e):
                cases[f"{method}, {s} samples"] = child(args, method, e, s)
        m = measure(cases, args.rounds, args.warmup)
        print_table(m, baseline="task_arithmetic", keys=("wall", "run_merge"), title=f"## {e} experts")
        results[e] = m.as_dict()
    (root / "results.json").write_text(json.dumps({"runs": results, "args": vars(args)}, indent=2))
    print(f"results: {root / 'results.json'}")


if __name__ == "__main__":
    main()
