"""One merge by FusionBench's own implementation (package ``fusion-bench``, installed outside this repository), the
same work as one ``mergekit-yaml`` run: load the base and the experts (safetensors), merge, write a safetensors
checkpoint. ``bench_merge_methods.py --fusionbench PATH`` runs it as a fresh process per merge.

FusionBench's functions do the work: ``state_dict_sub`` for the task vectors, ``iso_c`` / ``iso_cts``
(``fusion_bench.method.isotropic_merging.iso_utils``) and ``compute_and_sum_svd_mem_reduction``
(``...task_singular_vector.utils.TSVM_utils``, what its ``TaskSingularVectorMerging`` calls) for the merged task
vector, then ``state_dict_mul`` / ``state_dict_add`` onto the base as its algorithm classes do. The defaults are
FusionBench's own, read from its ``fusion_bench_config/method`` files: Iso-C and Iso-CTS ``scaling_factor: 1.0``,
Iso-CTS ``common_space_fraction: 0.8``, TSV-M ``alpha: 1``. One setting is ours: ``exclude_keys`` lists the
matrices with a vocabulary axis (embeddings, lm_head), which FusionBench's default would give the spectral step and
ours gives plain task arithmetic (FusionBench's excluded keys get the mean of the task vectors, the same thing), so
that both sides do the same work. Its torch runs on torch's default threads (ours: the thread policy).

    python benchmarks/fusionbench_merge.py --fusionbench PATH --method iso_c --out OUT BASE EXPERT [EXPERT ...]
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

METHODS = ("iso_c", "tsv_m", "iso_cts")
CONFIG = {"iso_c": "isotropic_merging/iso_c.yaml", "iso_cts": "isotropic_merging/iso_cts.yaml",
          "tsv_m": "task_singular_vector/TaskSingularVectorMerging.yaml"}


def missing(folder) -> str:
    """Why ``folder`` cannot be used as FusionBench's install (empty when it can)."""
    if folder is None:
        return "no --fusionbench PATH given"
    if not (Path(folder) / "fusion_bench" / "method" / "isotropic_merging" / "iso_utils.py").is_file():
        return f"{folder} holds no fusion_bench package (see benchmarks/README.md for the install command)"
    return ""


def defaults(folder, method: str) -> dict:
    """FusionBench's own defaults for ``method``, from the config file its ``fusion_bench`` command would use."""
    import yaml

    return yaml.safe_load((Path(folder) / "fusion_bench_config" / "method" / CONFIG[method]).read_text())


def vocab_keys(state: dict, config: dict) -> list:
    """Matrices with a vocabulary axis: what our spectral methods leave to plain task arithmetic by default."""
    return [k for k, v in state.items() if v.dim() == 2 and config["vocab_size"] in v.shape]


def import_fusionbench(folder) -> None:
    """Put ``folder`` first on the path and import what ``merge`` uses (before any timing: the imports are the
    interpreter's start-up work, not the merge's)."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    import fusion_bench.method.isotropic_merging.iso_utils  # noqa: F401
    import fusion_bench.method.task_singular_vector.utils.TSVM_utils  # noqa: F401


def merge(folder, method: str, base: str, experts: list, device: str = "cpu") -> dict:
    """The merged state dict, FusionBench's functions on FusionBench's defaults (vocabulary matrices excluded)."""
    import_fusionbench(folder)
    import torch
    from fusion_bench.method.isotropic_merging.iso_utils import iso_c, iso_cts
    from fusion_bench.method.task_singular_vector.utils.TSVM_utils import compute_and_sum_svd_mem_reduction
    from fusion_bench.utils.state_dict_arithmetic import state_dict_add, state_dict_mul, state_dict_sub
    from safetensors.torch import load_file

    cfg = defaults(folder, method)
    with torch.no_grad():
        pretrained = load_file(str(Path(base) / "model.safetensors"))
        task_vectors = [state_dict_sub(load_file(str(Path(e) / "model.safetensors")), pretrained) for e in experts]
        exclude = vocab_keys(pretrained, json.loads((Path(base) / "config.json").read_text()))
        if method == "iso_c":
            merged_tv = state_dict_mul(iso_c(task_vectors, accelerator=device, exclude_keys=exclude),
                                       cfg["scaling_factor"])
        elif method == "iso_cts":
            merged_tv = state_dict_mul(iso_cts(task_vectors, cfg["common_space_fraction"], accelerator=device,
                                               exclude_keys=exclude), cfg["scaling_factor"])
        else:
            merged_tv = compute_and_sum_svd_mem_reduction(task_vectors, exclude_keys=exclude, accelerator=device)
            if isinstance(cfg["alpha"], (int, float)):
                merged_tv = state_dict_mul(merged_tv, cfg["alpha"])
        return state_dict_add(pretrained, merged_tv)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fusionbench", required=True, help="folder FusionBench was installed into (--target)")
    parser.add_argument("--method", choices=METHODS, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("base")
    parser.add_argument("experts", nargs="+")
    args = parser.parse_args()
    reason = missing(args.fusionbench)
    if reason:
        raise SystemExit(reason)
    from safetensors.torch import save_file

    import_fusionbench(args.fusionbench)
    start = time.perf_counter()
    state = merge(args.fusionbench, args.method, args.base, args.experts, "cuda" if args.cuda else "cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().cpu() for k, v in state.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copy(Path(args.base) / "config.json", out / "config.json")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from paired import report_seconds

    report_seconds("run_merge", time.perf_counter() - start)  # load, merge, save: what run_merge times for mergekit
    return 0


if __name__ == "__main__":
    sys.exit(main())
