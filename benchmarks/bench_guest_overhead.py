"""What wildmerge's door costs a merge of one of mergekit's own methods: wall time and peak RSS of the same
task_arithmetic merge through mergekit alone (hook off), through the stock path with the hook (warnings only, plus
one read of the output for NaN/Inf) and inside ``wildmerge_checks`` (what ``wildmerge merge`` does).

A random Llama of 45M parameters and two noisy experts are built locally (no hub). Each merge runs in its own
process (its peak RSS is its own), the three modes interleaved round after round (``paired.py``): the median time
of ``run_merge`` per mode and its ratio to mergekit alone (median of the per-round ratios, min, max), with the load
of other processes (LOADED figures marked).

    python benchmarks/bench_guest_overhead.py [--rounds 5]
"""

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from paired import Process, measure, print_table

MODES = ("mergekit alone", "with wildmerge (stock path)", "wildmerge_checks")

CHILD = r"""
import sys, time
import yaml
from paired import report_seconds
from mergekit.config import MergeConfiguration
from mergekit.merge import run_merge
from mergekit.options import MergeOptions
recipe, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
config = MergeConfiguration.model_validate(yaml.safe_load(open(recipe)))
options = MergeOptions(copy_tokenizer=False, quiet=True)
start = time.perf_counter()
if mode == "wildmerge_checks":
    from wildmerge.plugins.entrypoint import wildmerge_checks
    with wildmerge_checks():
        run_merge(config, out, options)
else:
    run_merge(config, out, options)
report_seconds("run_merge", time.perf_counter() - start)
"""


def build(root: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    base.save_pretrained(root / "base")
    for i in (1, 2):
        with torch.no_grad():
            for p in base.parameters():
                p.add_(0.01 * torch.randn_like(p))
        base.save_pretrained(root / f"e{i}")
    recipe = root / "recipe.yml"
    recipe.write_text(json.dumps({"merge_method": "task_arithmetic", "base_model": str(root / "base"),
                                  "dtype": "float32", "models": [{"model": str(root / f"e{i}"),
                                                                  "parameters": {"weight": 0.5}} for i in (1, 2)]}))
    print(f"model: {sum(p.numel() for p in base.parameters()) / 1e6:.1f}M parameters, float32, 2 experts")
    return recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        recipe = build(root)
        cases = {mode: Process(["-c", CHILD, str(recipe), str(root / f"out{i}"), mode],
                               env={"WILDMERGE_AUTOLOAD": "0" if mode == MODES[0] else "1"},
                               before=lambda out=root / f"out{i}": shutil.rmtree(out, ignore_errors=True))
                 for i, mode in enumerate(MODES)}
        m = measure(cases, args.rounds, args.warmup)
    print_table(m, baseline=MODES[0], keys=("run_merge",))


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t:.0f} s in all)")
