"""Does the demo family train to the same bits under what differs between machines?

Builds the quick family once per variant of the environment (CPU kernel level for ATen, MKL and oneDNN, thread
counts), each in a fresh process into a temporary cache, and compares every file's SHA-256 with the first variant
run (this machine as it is, unless --only leaves it out) and with the cached family (``~/.cache/wildmerge/demo``, only read). Prints, per
variant, which files differ, the largest weight difference of the base, and the build time.

    python benchmarks/experiment_demo_reproducibility.py [--full] [--only NAME,...]
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
VARIANTS = {
    "as_is": {},
    "threads_2": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
    "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl_avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx2_machine": AVX2,
    "mkl_cbwr_avx2": {"MKL_CBWR": "AVX2"},
    "avx2_machine_cbwr": {**AVX2, "MKL_CBWR": "AVX2"},
    "mkl_sse42": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "MKL_CBWR": "SSE4_2"},
    "onednn_sse41": {"ONEDNN_MAX_CPU_ISA": "SSE41"},
    "pinned_avx2_mkl_avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},  # MKL's branch differs by vendor
    "pinned": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},  # what every default build sets
    "pinned_sse42_threads_2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "MKL_ENABLE_INSTRUCTIONS":
                               "SSE4_2", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
}

BUILD = """
import json, sys
from wildmerge.families.demo.build import build_family
m = build_family(sys.argv[1], seed=0, quick=sys.argv[2] == "quick", progress=False)  # in this process's kernels
print(json.dumps({"files": m["files"], "seconds": m["build_seconds"]}))
"""


def build(env: dict, out: Path, quick: bool) -> dict:
    full_env = {**os.environ, **env, "WILDMERGE_DEMO_CACHE": str(out.parent)}
    res = subprocess.run(["nice", "-n", "5", sys.executable, "-c", BUILD, str(out), "quick" if quick else "full"],
                         env=full_env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def max_diff(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    return max(float((x[k].double() - y[k].double()).abs().max()) for k in x)


def cached_family(quick: bool):
    """(family key, {file: sha256}) of the cached family this comparison reads: the one ``wildmerge demo`` uses
    (``$WILDMERGE_DEMO_CACHE`` or ``~/.cache/wildmerge/demo``), or an exit that says how to build it."""
    from wildmerge.families.demo.family import default_cache_dir, family_key

    key = family_key(0, quick)
    record = default_cache_dir() / key / "family.json"
    if not record.is_file():
        sys.exit(f"no cached demo family at {record.parent}: build it first (`wildmerge demo build"
                 f"{'' if not quick else ' --quick'}`), or point WILDMERGE_DEMO_CACHE at the folder that holds it")
    return key, json.loads(record.read_text())["files"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="the 12-expert family (minutes per variant)")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    args = ap.parse_args()
    names = [n for n in VARIANTS if not args.only or n in args.only.split(",")]
    key, cached = cached_family(quick=not args.full)
    tmp = Path(tempfile.mkdtemp(prefix="wm-repro-"))
    ref = None
    for name in names:
        out = tmp / name / key
        out.parent.mkdir(parents=True)
        t = time.time()
        r = build(VARIANTS[name], out, quick=not args.full)
        ref = ref or (r["files"], out)
        weights = [f for f in r["files"] if f.endswith(".safetensors")]
        differ = sorted(f for f in weights if r["files"][f] != ref[0][f])
        family = hashlib.sha256(json.dumps({f: r["files"][f] for f in weights}, sort_keys=True).encode())
        vs_cache = sorted(f for f in weights if r["files"][f] != cached.get(f))
        base_diff = max_diff(out / "base/model.safetensors", ref[1] / "base/model.safetensors")
        print(json.dumps({"variant": name, "env": VARIANTS[name], "weights": len(weights),
                          "family": family.hexdigest()[:12], "differ_from_first": len(differ), "differ_from_cache": len(vs_cache),
                          "base_max_abs_diff": base_diff, "build_seconds": r["seconds"],
                          "wall_seconds": round(time.time() - t, 1)}), flush=True)
    print(f"builds kept in {tmp}")


if __name__ == "__main__":
    main()
