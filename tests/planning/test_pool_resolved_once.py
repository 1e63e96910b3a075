"""One command resolves its pool once: ``sample --tune --select balanced`` selects, tunes and merges the pool as
resolved at the run manifest's pinned commits and with ``--no-download``, so a resumed run whose hub branch moved
never tunes on newer weights than it merges."""

import json
import shutil

import pytest
import yaml

from wildmerge import hub
from wildmerge.cli import main

OLD, NEW = "1" * 40, "2" * 40


@pytest.fixture
def hub_pool(tmp_path, monkeypatch):
    """A pool of the quick demo family's base and two experts served from a real huggingface_hub cache layout:
    ``org/e1`` and ``org/e2`` each at two commits (OLD: expert_01 / expert_02, NEW: other weights), main at OLD."""
    from wildmerge.families.demo.family import ensure_family

    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    family = yaml.safe_load(open(ensure_family(quick=True, progress=False)["pool_file"]))
    experts = {e["name"]: e for e in family["experts"]}
    cache = tmp_path / "hub"
    pairs = {"e1": ("expert_01", "expert_03"), "e2": ("expert_02", "expert_03")}
    for repo, (old, new) in pairs.items():
        root = cache / f"models--org--{repo}"
        for commit, source in ((OLD, old), (NEW, new)):
            shutil.copytree(experts[source]["model"], root / "snapshots" / commit)
        (root / "refs").mkdir()
        (root / "refs" / "main").write_text(OLD)
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    pool = {"name": "hubbed", "base": {"model": family["base"]["model"]},
            "experts": [{"model": f"org/{repo}", "name": repo, "calibration": experts[old]["calibration"]}
                        for repo, (old, _) in pairs.items()]}
    path = tmp_path / "pool.yml"
    path.write_text(yaml.safe_dump(pool))
    return path, cache


def _spy(monkeypatch) -> list:
    """Every hub.resolve call of the command (the real resolver runs): (reference, revision, download)."""
    calls, real = [], hub.resolve

    def resolve(ref, revision=None, **kwargs):
        calls.append((ref, revision, kwargs.get("download")))
        return real(ref, revision, **kwargs)

    monkeypatch.setattr(hub, "resolve", resolve)
    return calls


def test_a_resumed_tune_uses_the_pinned_commits_resolved_once(hub_pool, tmp_path, monkeypatch):
    pool, cache = hub_pool
    grid = tmp_path / "grid.yml"
    grid.write_text(yaml.safe_dump({"ta_lambda": {"method": "ta", "grid": {"lambda": [0.5, 1.0]}}}))
    out = tmp_path / "run"
    args = ["sample", "--pool", str(pool), "--out", str(out), "--methods", "ta", "--sizes", "2", "--k", "1",
            "--no-evaluate", "--tune", "--tune-grid", str(grid), "--tune-samples", "4", "--select", "balanced",
            "--no-download"]
    calls = _spy(monkeypatch)
    assert main(args) == 0
    hub_calls = [c for c in calls if c[0].startswith("org/")]
    assert sorted(c[0] for c in hub_calls) == ["org/e1", "org/e2"]  # once each, for the norms, the tuning, the merges
    assert all(download is False for _, _, download in calls)  # --no-download reached every resolution
    manifest = json.loads((out / "manifest.json").read_text())
    assert {m["name"]: m["revision"] for m in manifest["models"]["experts"]} == {"e1": OLD, "e2": OLD}
    tuned = manifest["tuned"]["ta"]

    for repo in ("e1", "e2"):  # the branch moves upstream: main now names other weights
        (cache / f"models--org--{repo}" / "refs" / "main").write_text(NEW)
    shutil.rmtree(out / "tune")  # the TAS sweep recomputed on resume
    calls.clear()
    assert main(args) == 0  # the norm balance on NEW weights would have drawn other subsets: refused
    hub_calls = [c for c in calls if c[0].startswith("org/")]
    assert sorted(hub_calls) == [("org/e1", OLD, False), ("org/e2", OLD, False)]
    resumed = json.loads((out / "manifest.json").read_text())["tuned"]["ta"]
    assert resumed["tas"] == tuned["tas"] and resumed["hparams"] == tuned["hparams"]  # the same weights tuned


def test_tune_resolves_its_pool_once_and_no_download_reaches_it(hub_pool, tmp_path, monkeypatch):
    pool, _ = hub_pool
    grid = tmp_path / "grid.yml"
    grid.write_text(yaml.safe_dump({"ta_lambda": {"method": "ta", "grid": {"lambda": [0.5, 1.0]}}}))
    calls = _spy(monkeypatch)
    assert main(["tune", "--pool", str(pool), "--grid", str(grid), "--samples", "4", "--out", str(tmp_path / "t"),
                 "--no-download"]) == 0
    hub_calls = [c for c in calls if c[0].startswith("org/")]
    assert sorted(c[0] for c in hub_calls) == ["org/e1", "org/e2"]  # once each
    assert all(download is False for _, _, download in calls)
