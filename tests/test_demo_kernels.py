"""The demo family with pinned ATen kernels: the same bits whatever kernels and threads the calling process runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wildmerge.demo.family import ensure_family, family_key
from wildmerge.errors import ConfigError

BUILD = "import sys; from wildmerge.demo.family import ensure_family; ensure_family(sys.argv[1], quick=True, " \
        "progress=False)"


def _files(info) -> dict:
    return json.loads(Path(info["manifest"]).read_text())["files"]


def test_pinned_kernels_give_one_family_whatever_the_caller_runs(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("WILDMERGE_DEMO_KERNELS", "default")
    here = ensure_family(tmp_path / "here", quick=True, progress=False)
    assert Path(here["root"]).name == family_key(0, True) == "v2-seed0-default-quick"
    manifest = json.loads(Path(here["manifest"]).read_text())
    assert manifest["kernels"]["aten"] == "DEFAULT" and manifest["kernels"]["pinned"] == "default"

    # "another machine": a caller running other ATen kernels and two threads
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2", "WILDMERGE_DEMO_KERNELS": "default"}
    subprocess.run([sys.executable, "-c", BUILD, str(tmp_path / "there")], env=env, check=True)
    there = json.loads((tmp_path / "there" / "v2-seed0-default-quick" / "family.json").read_text())["files"]
    assert there == _files(here)

    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":  # native kernels round otherwise: another family
        monkeypatch.delenv("WILDMERGE_DEMO_KERNELS")
        native = ensure_family(tmp_path / "native", quick=True, progress=False)
        assert _files(native)["base/model.safetensors"] != _files(here)["base/model.safetensors"]
        assert json.loads(Path(native["manifest"]).read_text())["kernels"]["pinned"] is None


def test_unknown_kernel_level_is_refused(monkeypatch):
    monkeypatch.setenv("WILDMERGE_DEMO_KERNELS", "avx3")
    with pytest.raises(ConfigError, match="WILDMERGE_DEMO_KERNELS='avx3'.*avx2, default"):
        family_key(0, True)


def test_a_native_build_on_other_kernels_says_the_readme_numbers_will_differ(tmp_path, capsys):
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    env.pop("WILDMERGE_DEMO_KERNELS", None)
    res = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path)], env=env, capture_output=True, text=True,
                         check=True)
    assert "torch runs DEFAULT kernels on this CPU; the README's demo numbers come from a build with AVX512" in \
        res.stdout
