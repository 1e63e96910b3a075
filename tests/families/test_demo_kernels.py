"""The demo family with pinned ATen kernels: what a machine with those kernels builds natively, whatever kernels and
threads the calling process runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wildmerge.families.demo.family import ensure_family, family_key
from wildmerge.errors import ConfigError

BUILD = "import sys; from wildmerge.families.demo.family import ensure_family; ensure_family(sys.argv[1], quick=True, " \
        "progress=False)"


def _files(manifest_path) -> dict:
    return json.loads(Path(manifest_path).read_text())["files"]


def test_pinned_avx2_family_is_what_an_avx2_machine_builds(tmp_path, monkeypatch):
    import torch

    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("this CPU has no vectorised ATen kernels")
    monkeypatch.setenv("WILDMERGE_DEMO_KERNELS", "avx2")
    pinned = ensure_family(tmp_path / "pinned", quick=True, progress=False)
    assert Path(pinned["root"]).name == family_key(0, True) == "v2-seed0-avx2-quick"
    manifest = json.loads(Path(pinned["manifest"]).read_text())
    assert manifest["kernels"] == {"aten": "AVX2", "pinned": "avx2", "mkl_cbwr": "AVX2"}

    # "an AVX2 machine": a native build (nothing pinned) in a process whose torch runs AVX2 kernels, on two threads
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2"}
    env.pop("WILDMERGE_DEMO_KERNELS")
    res = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path / "avx2")], env=env, capture_output=True,
                         text=True, check=True)
    assert "torch runs AVX2 kernels on this CPU; the README's demo numbers come from a build with AVX512" in res.stdout
    assert _files(tmp_path / "avx2" / "v2-seed0-quick" / "family.json") == _files(pinned["manifest"])

    if torch.backends.cpu.get_cpu_capability() != "AVX2":  # this machine's own kernels round otherwise
        monkeypatch.delenv("WILDMERGE_DEMO_KERNELS")
        native = ensure_family(tmp_path / "native", quick=True, progress=False)
        assert _files(native["manifest"])["base/model.safetensors"] != _files(pinned["manifest"])[
            "base/model.safetensors"]
        assert json.loads(Path(native["manifest"]).read_text())["kernels"]["pinned"] is None


def test_unknown_kernel_level_is_refused(monkeypatch):
    monkeypatch.setenv("WILDMERGE_DEMO_KERNELS", "avx3")
    with pytest.raises(ConfigError, match="WILDMERGE_DEMO_KERNELS='avx3'.*avx2, default"):
        family_key(0, True)
