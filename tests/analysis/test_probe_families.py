"""The fresh-head probe over model seeds as the paper ran it (Tables 5 and 6): quick demo families built from other
seeds and random skill partitions, each with its own joint reference, and the per-seed tables read from the runs'
probe records. Real tiny Qwen3 models, real mergekit."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from wildmerge.analysis.probe.families import per_seed_rows, probe_over_families
from wildmerge.cli import main
from wildmerge.errors import ConfigError
from wildmerge.families.cache import sha256
from wildmerge.families.demo.family import ensure_family, family_key, resolve_demo_ref
from wildmerge.families.demo.partition import experts_of, parse_partition, task_skills
from wildmerge.families.demo.probe_data import ensure_probe_data
from wildmerge.families.demo.skills import SKILLS

P100 = "random:100:3"


@pytest.fixture(scope="module")
def families():
    """The quick family of seeds 0 and 1 and the partition family random:100:3 of seed 0, each with its probe data."""
    out = {}
    for name, seed, partition in (("seed0", 0, None), ("seed1", 1, None), ("p100", 0, P100)):
        info = ensure_family(seed=seed, quick=True, progress=False, partition=partition)
        out[name] = (info, ensure_probe_data(info, progress=False))
    return out


def _weights(folder) -> str:
    return sha256(Path(folder) / "model.safetensors")


def test_a_family_of_another_seed_has_its_own_bytes_and_joint_reference(families, monkeypatch):
    (info0, probe0), (info1, probe1) = families["seed0"], families["seed1"]
    assert Path(info1["root"]).name == family_key(1, True) != family_key(0, True)
    assert _weights(info0["base"]) != _weights(info1["base"])
    assert all(_weights(info0["experts"][e]) != _weights(info1["experts"][e]) for e in info0["experts"])
    assert probe0["root"] != probe1["root"] and _weights(probe0["joint"]) != _weights(probe1["joint"])
    assert json.loads(Path(probe1["manifest"]).read_text())["family"] == info1["root"]
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    monkeypatch.setenv("WILDMERGE_DEMO_SEED", "1")  # how a run names the family of another seed
    assert resolve_demo_ref("demo:joint") == probe1["joint"]
    assert resolve_demo_ref("demo:expert_02") == info1["experts"]["expert_02"]


def test_a_partition_family_shares_the_base_and_has_its_own_experts_and_joint(families, monkeypatch):
    (info0, probe0), (part, probe_p) = families["seed0"], families["p100"]
    assert Path(part["root"]).name == family_key(0, True) + "-random100t3" and part["partition"] == P100
    assert _weights(part["base"]) == _weights(info0["base"])  # the same pretrained model, theta_pre
    manifest = json.loads(Path(part["manifest"]).read_text())
    assert manifest["partition"] == {"name": P100, "tasks": task_skills(P100)}
    assert [e["mixture"] for e in manifest["experts"]] == [dict.fromkeys(t, 1) for t in task_skills(P100)]
    assert _weights(part["experts"]["expert_01"]) != _weights(info0["experts"]["expert_01"])
    assert probe_p["root"] != probe0["root"] and _weights(probe_p["joint"]) != _weights(probe0["joint"])
    assert "partition" not in json.loads(Path(info0["manifest"]).read_text())  # the family's own record unchanged
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    monkeypatch.setenv("WILDMERGE_DEMO_PARTITION", P100)
    assert resolve_demo_ref("demo:joint") == probe_p["joint"]
    assert resolve_demo_ref("demo:expert_03") == part["experts"]["expert_03"]


def test_the_partition_is_seeded_reproducible_and_the_papers_randperm():
    for seed, tasks in ((100, 3), (200, 3), (7, 2), (1, 5)):
        perm = torch.randperm(len(SKILLS), generator=torch.Generator().manual_seed(seed)).tolist()
        sizes = [len(SKILLS) // tasks + (t < len(SKILLS) % tasks) for t in range(tasks)]
        cuts = np.cumsum([0] + sizes)
        want = [[SKILLS[i] for i in sorted(perm[cuts[t]:cuts[t + 1]])] for t in range(tasks)]
        assert task_skills(f"random:{seed}:{tasks}") == want == task_skills(f"random:{seed}:{tasks}")
        assert sorted(s for block in want for s in block) == sorted(SKILLS) and all(want)
    assert task_skills("random:100:3") != task_skills("random:200:3")
    assert [e.name for e in experts_of(True, P100)] == ["expert_01", "expert_02", "expert_03"]


@pytest.mark.parametrize("text, why", [("random:100", "not random:SEED:TASKS"), ("ward:3", "not random:SEED:TASKS"),
                                       ("random:x:3", "not random:SEED:TASKS"),
                                       ("random:100:6", "leaves a task without a skill"),
                                       ("random:100:1", "no partition to merge")])
def test_bad_partitions_get_one_clear_error(text, why, monkeypatch):
    with pytest.raises(ConfigError, match=why):
        parse_partition(text)
    monkeypatch.setenv("WILDMERGE_DEMO_PARTITION", text)
    with pytest.raises(ConfigError, match="WILDMERGE_DEMO_PARTITION"):
        resolve_demo_ref("demo:base", build=False)


def test_the_per_seed_table_by_hand_on_a_small_case():
    """Two seeds, one model and task: N 0.2 / 0.4, FH 0.8 / 0.7, J 0.9 / 1.0 (each seed its own J)."""
    from wildmerge.analysis.probe.seeds import aggregate_probe

    records = [{"reference": f"/j{s}", "rows": [{"model_id": "ta__n03_full", "kind": "merge", "method": "ta",
                                                  "task": "union", "readout": "matched", "native": n,
                                                  "fresh_head_mean": fh, "joint": j}]}
               for s, (n, fh, j) in enumerate(((0.2, 0.8, 0.9), (0.4, 0.7, 1.0)))]
    per_run = [per_seed_rows(f"run{s}", {"seed": s}, rec) for s, rec in enumerate(records)]
    assert [r[0]["recovered"] for r in per_run] == pytest.approx([0.6 / 0.7, 0.3 / 0.6])
    row, = aggregate_probe([[{**r, "fresh_head_mean": r["fresh_head"]} for r in rows] for rows in per_run])
    assert row["native_mean"] == pytest.approx(0.3) and row["native_sd"] == pytest.approx(0.1 * 2 ** 0.5)
    assert row["fresh_head_sd"] == pytest.approx(0.05 * 2 ** 0.5) and row["joint_mean"] == pytest.approx(0.95)
    r1, r2 = 0.6 / 0.7, 0.5
    assert row["recovered_mean"] == pytest.approx((r1 + r2) / 2)
    assert row["recovered_sd"] == pytest.approx(abs(r1 - r2) / 2 ** 0.5)
    assert row["recovered_ratio_of_means"] == pytest.approx((0.75 - 0.3) / (0.95 - 0.3))


def _suite(path: Path, include: str) -> str:
    path.write_text(yaml.safe_dump({
        "name": "probe_mini", "include_path": include,
        "tasks": [{"task": "demo_probe_count", "num_fewshot": 0, "label": "count"}],
        "settings": {"dtype": "float32", "batch_size": 16, "device": "cpu", "include_defaults": False}}))
    return str(path)


def test_the_tables_over_families_from_real_runs_each_with_its_own_joint(families, tmp_path, capsys):
    runs, suites = {}, {}
    for name in ("seed0", "seed1", "p100"):
        info, probe = families[name]
        run = tmp_path / name
        suite = suites[name] = _suite(tmp_path / f"{name}.yml", probe["tasks"])
        assert main(["sample", "--base", info["pool_file"], "--out", str(run), "--methods", "ta", "--sizes", "3",
                     "--k", "1", "--no-full", "--no-evaluate"]) == 0
        assert main(["analyze", "probe", str(run), "--suite", suite, "--reference", probe["joint"], "--seeds", "0",
                     "--models", "ta__n03_full"]) == 0
        runs[name] = run
    out = tmp_path / "table5"
    assert main(["analyze", "probe-families", str(runs["seed0"]), str(runs["seed1"]), "--suite", suite,
                 "--out", str(out)]) == 0
    table = json.loads((out / "families.json").read_text())
    records = [json.loads((runs[n] / "probe" / "probe_mini" / "probe.json").read_text())["rows"][0]
               for n in ("seed0", "seed1")]
    n, fh, j = (np.array([r[k] for r in records], dtype=np.float64) for k in ("native", "fresh_head_mean", "joint"))
    assert j[0] != j[1]  # each seed's own joint reference
    assert [r["model_seed"] for r in table["per_seed"]] == [0, 1]
    assert [r["joint"] for r in table["per_seed"]] == pytest.approx(j.tolist(), abs=1e-12)
    row, = table["summary"]
    assert row["native_mean"] == pytest.approx(n.mean(), abs=1e-12)
    assert row["native_sd"] == pytest.approx(n.std(ddof=1), abs=1e-12)
    assert row["fresh_head_sd"] == pytest.approx(fh.std(ddof=1), abs=1e-12)
    assert row["joint_sd"] == pytest.approx(j.std(ddof=1), abs=1e-12)
    if j.mean() - n.mean() > 0.01:
        assert row["recovered_ratio_of_means"] == pytest.approx((fh.mean() - n.mean()) / (j.mean() - n.mean()))
    assert "Table 5 analogue" in (out / "families.md").read_text()
    # one clear error each: a run twice, runs of one family, a partition mixed with a family's own experts
    for bad, why in (([runs["seed0"], runs["seed0"]], "given twice"),
                     ([runs["seed0"], runs["p100"]], "different partitions")):
        with pytest.raises(ConfigError, match=why):
            probe_over_families(list(map(str, bad)), "probe_mini")
    again = tmp_path / "again"
    assert main(["sample", "--base", families["seed0"][0]["pool_file"], "--out", str(again), "--methods", "ta",
                 "--sizes", "3", "--k", "1", "--no-full", "--no-evaluate"]) == 0
    with pytest.raises(ConfigError, match="no probe record"):
        probe_over_families([str(runs["seed0"]), str(again)], "probe_mini")
    assert main(["analyze", "probe", str(again), "--suite", suites["seed0"], "--reference", families["seed0"][1]["joint"],
                 "--seeds", "0", "--models", "ta__n03_full"]) == 0
    with pytest.raises(ConfigError, match="share one joint reference"):
        probe_over_families([str(runs["seed0"]), str(again)], "probe_mini")


def test_demo_build_names_the_partition_family_and_refuses_it_for_smollm2(families, capsys):
    part, _ = families["p100"]
    assert main(["demo", "build", "--quick", "--partition", P100]) == 0
    out = capsys.readouterr().out
    assert part["root"] in out and part["pool_file"] in out and f"random task 1 of {P100}" in out
    assert main(["demo", "build", "--quick", "--partition", P100, "--family", "smollm2"]) != 0
    assert "demo family only" in capsys.readouterr().err
