"""A run made with one embedded family never resumes on another: a new builder version or other kernels make
other weights, and the rerun says so before any merge."""

import json
from pathlib import Path

import pytest

from wildmerge.cli import main


@pytest.fixture
def quick_pool(monkeypatch):
    from wildmerge.families.demo.family import ensure_family

    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    return ensure_family(quick=True, progress=False)["pool_file"]


def test_a_run_of_an_older_family_is_refused_with_what_to_do(quick_pool, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["sample", "--base", quick_pool, "--out", str(out), "--methods", "ta", "--sizes", "2", "--k", "1",
            "--no-evaluate"]
    assert main(args) == 0
    assert main(args) == 0  # the same family: resumes, nothing to do
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    key = Path(manifest["models"]["base"]["path"]).parent.name  # v3-seed0-quick
    for model in [manifest["models"]["base"], *manifest["models"]["experts"]]:  # as made by builder 2
        model["path"] = model["path"].replace(f"/{key}/", "/v2-seed0-quick/")
    manifest_path.write_text(json.dumps(manifest))
    models_before = sorted(p.name for p in (out / "models").iterdir())
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was made with the family v2-seed0-quick, but base now resolves to " + key in err[0]
    assert "pass a new --out" in err[0]
    assert sorted(p.name for p in (out / "models").iterdir()) == models_before  # nothing merged, nothing removed
