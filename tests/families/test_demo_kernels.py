"""The demo family on every x86-64 machine: the default build pins its kernels (ATen AVX2, MKL COMPATIBLE) and is,
file for file, the published family whose SHA-256 ship with wildmerge, whatever kernels and threads the calling
process runs; a build that differs says which component differs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wildmerge.errors import ConfigError
from wildmerge.families import kernels, published
from wildmerge.families.demo.family import ensure_family, family_key

BUILD = "import sys; from wildmerge.families.demo.family import ensure_family; ensure_family(sys.argv[1], quick=True, " \
        "progress=False)"


def _manifest(root) -> dict:
    return json.loads((Path(root) / "family.json").read_text())


@pytest.fixture
def x86_avx2():
    if kernels.level("WILDMERGE_NO_SUCH") != "avx2":
        pytest.skip("the published family needs an x86-64 CPU with AVX2")


def test_the_default_quick_family_is_the_published_one_whatever_the_callers_kernels_and_threads(x86_avx2, tmp_path):
    """Built in a process that runs scalar ATen kernels, MKL capped to SSE4.2 and two threads: the pins decide."""
    env = {k: v for k, v in os.environ.items() if k != "WILDMERGE_DEMO_KERNELS"}
    env.update(ATEN_CPU_CAPABILITY="default", MKL_ENABLE_INSTRUCTIONS="SSE4_2", OMP_NUM_THREADS="2",
               MKL_NUM_THREADS="2")
    res = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    key = "v3-seed0-quick"
    manifest = _manifest(tmp_path / key)
    assert manifest["kernels"] == {"level": "avx2", "aten": "AVX2", "mkl_cbwr": "COMPATIBLE"}
    want = published.records("demo")[key]
    assert manifest["files"] == want["files"], published.compare("demo", key, manifest)
    assert f"wildmerge demo: {key} is the published family (all {len(want['files'])} files match" in res.stdout


def test_native_kernels_are_another_family_under_their_own_key(monkeypatch):
    monkeypatch.setenv("WILDMERGE_DEMO_KERNELS", "native")
    assert family_key(0, True) == "v3-seed0-native-quick"
    assert "another family than the published one" in kernels.other_family_note("demo", "native")
    monkeypatch.delenv("WILDMERGE_DEMO_KERNELS")
    assert family_key(0, False) in ("v3-seed0", "v3-seed0-default", "v3-seed0-native")  # by this CPU


def test_unknown_kernel_level_is_refused(monkeypatch):
    monkeypatch.setenv("WILDMERGE_DEMO_KERNELS", "avx3")
    with pytest.raises(ConfigError, match="WILDMERGE_DEMO_KERNELS='avx3'.*avx2, default, native"):
        family_key(0, True)


def test_a_build_that_differs_names_the_component_and_what_to_do():
    key = "v3-seed0-quick"
    record = published.records("demo")[key]
    same = {**record, "files": dict(record["files"])}
    assert "is the published family" in published.compare("demo", key, same)
    assert published.compare("demo", "v3-seed7", same) is None  # no record for other seeds: nothing to say

    other = {**same, "files": {**same["files"], "base/model.safetensors": "0" * 64},
             "versions": {**record["versions"], "torch": "2.12.0"}}
    said = published.compare("demo", key, other)
    assert said.startswith(f"wildmerge demo: this build is not the published family {key}: 1 of ")
    assert "base/model.safetensors" in said and "torch 2.12.0 here" in said and "make setup" in said

    kernels_differ = {**other, "versions": record["versions"],
                      "kernels": {"level": "native", "aten": "AVX512", "mkl_cbwr": None}}
    said = published.compare("demo", key, kernels_differ)
    assert "kernels ATen AVX512 / MKL_CBWR None here, AVX2 / COMPATIBLE published" in said

    unknown = {**other, "versions": record["versions"]}
    assert "a host difference not known yet; please report it" in published.compare("demo", key, unknown)
