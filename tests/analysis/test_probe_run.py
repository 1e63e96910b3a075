"""The fresh-head probe end to end on the quick demo family: real tiny Qwen3 models, real mergekit, real lm-eval."""

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from helpers import write_tasks
from wildmerge.analysis.probe.probe_models import ProbeModel, run_probe
from wildmerge.analysis.probe.data import load_probe_tasks
from wildmerge.analysis.probe.features import cache_dir, check_fits, compute, features_for, load_cached
from wildmerge.cli import main
from wildmerge.families.demo.family import ensure_family
from wildmerge.families.demo.probe_data import ensure_probe_data
from wildmerge.errors import WildmergeError
from wildmerge.eval.evaluate import evaluate_run
from wildmerge.eval.features import load_causal_lm
from wildmerge.eval.suites import load_suite


def _suite(path: Path, include: str, tasks) -> str:
    path.write_text(yaml.safe_dump({
        "name": "probe_mini", "include_path": include, "tasks": tasks,
        "settings": {"dtype": "float32", "batch_size": 16, "device": "cpu", "include_defaults": False}}))
    return str(path)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    info = ensure_family(root / "cache", seed=0, quick=True, progress=False)
    probe = ensure_probe_data(info, progress=False)
    suite = _suite(root / "suite.yml", probe["tasks"],
                   [{"task": "demo_probe_count", "num_fewshot": 0, "label": "count"},
                    {"task": "demo_probe_add", "num_fewshot": 0, "label": "add"}])
    return info, probe, suite


def test_probe_data_is_additive_and_has_fixed_label_splits(family):
    info, probe, _ = family
    assert Path(probe["root"]).parent == Path(info["root"]).parent and probe["root"] != info["root"]
    manifest = json.loads(Path(info["manifest"]).read_text())
    assert not any("probe" in f or "joint" in f for f in manifest["files"])  # the family itself is untouched
    for name in probe["task_names"]:
        docs = {s: [json.loads(x) for x in open(Path(probe["tasks"]) / f"{name}.{s}.jsonl")]
                for s in ("train", "validation", "test")}
        assert all(d["choices"] == docs["train"][0]["choices"] for s in docs.values() for d in s)
        prompts = {s: {d["prompt"] for d in v} for s, v in docs.items()}
        assert not prompts["train"] & prompts["test"] and not prompts["validation"] & prompts["test"]
    assert (Path(probe["joint"]) / "model.safetensors").is_file()


def test_end_to_end_run_with_compositions_and_lm_eval(family, tmp_path):
    info, probe, suite = family
    run = tmp_path / "run"
    assert main(["sample", "--base", info["pool_file"], "--out", str(run), "--methods", "ta", "--sizes", "2",
                 "--k", "1", "--no-full", "--no-evaluate"]) == 0
    assert main(["analyze", "probe", str(run), "--suite", suite, "--reference", probe["joint"], "--seeds", "0,1",
                 "--composition", "--join-leaderboard"]) == 0
    out = run / "probe" / "probe_mini"
    rows = json.loads((out / "probe.json").read_text())["rows"]
    by = {(r["model_id"], r["task"]): r for r in rows}
    assert by[("base", "count")]["readout"] == "matched"  # labels 1-4 are one token each
    assert by[("base", "add")]["readout"] == "unmatched"  # the quick tokenizer splits some sums
    for r in rows:
        if r["kind"] == "composition":
            assert r["status"].startswith("missing") and 0 <= r["native"] <= 1
            continue
        fh = json.loads(r["fresh_head_per_seed"])
        assert len(fh) == 2 and r["fresh_head_mean"] == pytest.approx(sum(fh) / 2)
        if r["recovered_mean"] is not None:
            assert r["recovered_mean"] == pytest.approx((r["fresh_head_mean"] - r["native"]) /
                                                        (r["joint"] - r["native"]))
    assert {r["model_id"] for r in rows} >= {"ensemble__n02_s00", "composer__n02_s00", "ta__n02_s00", "base"}
    # N is what lm-eval itself scores on the test split
    evaluate_run(str(run), suite, model_ids=["base"])
    from wildmerge.analysis.report.scores import collect_scores

    scores, _, _ = collect_scores(str(run), "probe_mini")
    for model_id in ("base",):
        lm_eval_row = scores[scores["model_id"] == model_id].iloc[0]
        for task in ("count", "add"):
            assert by[(model_id, task)]["native"] == pytest.approx(lm_eval_row[task] / 100, abs=1e-9)
    board = (run / "report" / "leaderboard_probe.csv").read_text()
    assert "probe_native_count" in board and "probe_R_add" in board and "Composer" in board
    assert (out / "probe_fig1.png").stat().st_size > 0 and "unmatched" in (out / "probe.md").read_text()


def test_feature_cache_equals_recomputation(family, tmp_path):
    info, _, suite = family
    tasks, _ = load_probe_tasks(load_suite(suite))
    first = features_for(info["base"], "sha256:base", tasks, tmp_path)
    cached = {n: load_cached(cache_dir(tmp_path, "sha256:base", t)) for n, t in tasks.items()}
    model, tok = load_causal_lm(info["base"])
    for name, task in tasks.items():
        fresh = compute(model, tok, task)
        assert cached[name]["matched"] == fresh["matched"] == first[name]["matched"]
        for split in ("train", "validation", "test"):
            for key, value in fresh[split].items():
                assert torch.equal(cached[name][split][key], value), (name, split, key)


def test_bad_input_is_named_or_marked_missing(family, tmp_path):
    info, probe, _ = family
    mini = write_tasks(tmp_path / "mini")
    docs = [json.loads(x) for x in (mini / "mini_mc.jsonl").read_text().splitlines()]
    (mini / "varied.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    varied = yaml.safe_load((mini / "mini_mc.yaml").read_text())
    varied.update(task="mini_varied", training_split="test", validation_split="test")
    varied["dataset_kwargs"]["data_files"] = {"test": str(mini / "varied.jsonl")}
    (mini / "mini_varied.yaml").write_text(yaml.safe_dump(varied))
    suite = load_suite(_suite(tmp_path / "bad.yml", str(mini), [
        {"task": "mini_mc", "num_fewshot": 0}, {"task": "mini_gen", "num_fewshot": 0, "metric": "exact_match,none"},
        {"task": "mini_varied", "num_fewshot": 0}]))
    tasks, skipped = load_probe_tasks(suite)
    assert not tasks
    assert "no train / validation split" in skipped["mini_mc"]
    assert "free text" in skipped["mini_gen"]
    assert "label set differs" in skipped["mini_varied"]
    assert main(["analyze", "probe", "--model", info["base"], "--suite", str(tmp_path / "bad.yml"),
                 "--out", str(tmp_path / "o")]) != 0  # nothing to probe: a clear error, not an empty table
    good = _suite(tmp_path / "good.yml", probe["tasks"], [{"task": "demo_probe_count", "num_fewshot": 0}])
    tasks, _ = load_probe_tasks(load_suite(good))
    with pytest.raises(WildmergeError, match="GiB.*--max-memory-gib"):
        check_fits(info["base"], tasks["demo_probe_count"], "cpu", max_memory_gib=1e-4)
    rows = run_probe([ProbeModel("base", info["base"]), ProbeModel("broken", str(tmp_path / "nowhere"))], tasks,
                     {"mini_gen": "free text"}, tmp_path / "f", seeds=(0,), fingerprint=lambda p: "sha256:" + p[-8:],
                     max_memory_gib=1e-4)
    assert all(r["status"].startswith("missing") for r in rows)  # too big for the memory allowed: marked, not run
    rows = run_probe([ProbeModel("base", info["base"])], tasks, {"mini_gen": "free text"}, tmp_path / "f",
                     seeds=(0,), fingerprint=lambda p: "sha256:base")
    ok = next(r for r in rows if r["task"] == "demo_probe_count")
    assert "--reference" in ok["status"] and math.isnan(ok["recovered_ratio_of_means"])
    assert next(r for r in rows if r["task"] == "mini_gen")["status"] == "missing: free text"


def test_composition_model_scores_like_its_experts(family, tmp_path):
    """An ensemble of one expert is that expert; the one-pass path for one-token choices equals full passes."""
    from lm_eval.api.instance import Instance
    from lm_eval.api.registry import get_model

    from wildmerge.eval.composition import MODEL_NAME, CompositionSpec, write_composition
    from wildmerge.eval.composition_lm import register
    from wildmerge.eval.features import continuation_loglikelihoods

    info, probe, _ = family
    expert = info["experts"]["expert_01"]
    register()
    pairs = [(c, " " + x) for c in ("Q: count a in a b a\nA:", "Q: 3+4=\nA:") for x in ("1", "2", "7", "30", "21")]
    requests = [Instance("loglikelihood", {}, p, 0) for p in pairs]
    write_composition(tmp_path / "one", CompositionSpec(kind="ensemble", experts={"expert_01": expert}))
    lm = get_model(MODEL_NAME)(pretrained=str(tmp_path / "one"), batch_size=4)
    model, tok = load_causal_lm(expert)
    want = continuation_loglikelihoods(model, tok, pairs)
    assert [v for v, _ in lm.loglikelihood(requests, True)] == pytest.approx(want, abs=1e-4)
    spec = CompositionSpec(kind="composer", experts=dict(info["experts"]), router=info["base"],
                           calibration=probe["calibration"])
    write_composition(tmp_path / "composer", spec)
    composer = get_model(MODEL_NAME)(pretrained=str(tmp_path / "composer"), batch_size=4)
    fast, full = composer.loglikelihood(requests, True), composer._full_loglikelihood(pairs, True)
    assert [a for a, _ in fast] == pytest.approx([b for b, _ in full], abs=1e-4)
    assert [a for _, a in fast] == [b for _, b in full]


def test_a_lora_adapter_is_probed_folded_into_its_base(family, tmp_path, monkeypatch, capsys):
    """``--model ADAPTER`` probes base + scale * B A (the sampler's fold), with --base when its declared base is not
    on this machine; without one it is refused, naming the fix, before any feature is computed."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    info, probe, _ = family
    monkeypatch.setenv("WILDMERGE_ADAPTER_CACHE", str(tmp_path / "adapters"))
    torch.manual_seed(3)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(info["base"], dtype=torch.float32),
                          LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], init_lora_weights=False))
    adapter = tmp_path / "adapter"
    lora.save_pretrained(str(adapter))
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "nobody/absent"}))
    suite = _suite(tmp_path / "one.yml", probe["tasks"], [{"task": "demo_probe_count", "num_fewshot": 0}])
    out = tmp_path / "probe"
    assert main(["analyze", "probe", "--model", str(adapter), "--suite", suite, "--out", str(out)]) == 2
    assert "--base" in capsys.readouterr().err and not out.exists()
    assert main(["analyze", "probe", "--model", str(adapter), "--base", info["base"], "--suite", suite,
                 "--seeds", "0", "--out", str(out)]) == 0
    row = json.loads((out / "probe.json").read_text())["rows"][0]
    assert row["model_id"] == str(adapter) and row["status"].startswith("ok") and 0 <= row["native"] <= 1
    folded = next((tmp_path / "adapters").glob("adapter-*"))
    weights, base = load_file(str(folded / "model.safetensors")), load_file(str(Path(info["base"]) / "model.safetensors"))
    factors = load_file(str(adapter / "adapter_model.safetensors"))
    key = "model.layers.0.self_attn.q_proj.weight"
    a = factors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].double()
    b = factors["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"].double()
    expected = base[key].double() + (4 / 2) * b @ a  # Hu et al. 2021: W + (alpha / r) B A
    assert torch.allclose(weights[key].double(), expected, atol=1e-5)


def test_probe_over_subset_draws_and_class_partitions_on_real_runs(family, tmp_path):
    """Two runs sampled with different seeds (two subset draws), probed in one command with Ward and random class
    partitions: the tables over the draws equal float64 numpy over the runs' own tables; the Ward partition equals
    scipy's Ward on the router's class means; one composer cell equals a float64 loop over the same heads."""
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage

    from wildmerge.analysis.probe.metrics import HeadSettings, fit_head
    from wildmerge.eval.fingerprint import fingerprint_model

    info, probe, suite = family
    runs = [tmp_path / f"run{s}" for s in (0, 2)]
    for seed, run in zip((0, 2), runs):
        assert main(["sample", "--base", info["pool_file"], "--out", str(run), "--seed", str(seed), "--methods", "ta",
                     "--sizes", "2", "--k", "1", "--no-full", "--no-evaluate"]) == 0
    subsets = [json.loads((r / "manifest.json").read_text())["subsets"][0]["experts"] for r in runs]
    assert subsets[0] != subsets[1]  # the draws merge different experts
    out = tmp_path / "seeds"
    assert main(["analyze", "probe", *map(str, runs), "--suite", suite, "--reference", probe["joint"], "--seeds", "0,1",
                 "--models", "base,ta__n02_s00", "--partitions", "ward,random:100", "--partition-tasks", "2",
                 "--out", str(out)]) == 0
    per_run = [{(r["model_id"], r["task"]): r for r in json.loads((run / "probe" / "probe_mini" / "probe.json")
                                                                   .read_text())["rows"]} for run in runs]
    rows = {(r["model_id"], r["task"]): r for r in json.loads((out / "seeds.json").read_text())["rows"]}
    assert set(rows) == {(m, t) for m in ("base", "ta__n02_s00") for t in ("count", "add")}
    for key, row in rows.items():
        n = np.array([p[key]["native"] for p in per_run], dtype=np.float64)
        fh = np.array([p[key]["fresh_head_mean"] for p in per_run], dtype=np.float64)
        j = np.array([p[key]["joint"] for p in per_run], dtype=np.float64)
        assert row["model_seeds"] == 2
        assert row["native_mean"] == pytest.approx(n.mean(), abs=1e-12)
        assert row["native_sd"] == pytest.approx(n.std(ddof=1), abs=1e-12)
        assert row["fresh_head_mean"] == pytest.approx(fh.mean(), abs=1e-12)
        assert row["fresh_head_sd"] == pytest.approx(fh.std(ddof=1), abs=1e-12)
        assert row["delta_rr_sd"] == pytest.approx((fh - n).std(ddof=1), abs=1e-12)
        if j.mean() - n.mean() > 0.01:
            want = (fh.mean() - n.mean()) / (j.mean() - n.mean())
            assert row["recovered_ratio_of_means"] == pytest.approx(want, abs=1e-12)
        else:
            assert row["recovered_ratio_of_means"] is None
    geo_runs = [{(r["model_id"], r["task"], r["partition"]): r for r in json.loads(
        (run / "probe" / "probe_mini" / "geometry.json").read_text())["rows"]} for run in runs]
    geo = {(r["model_id"], r["task"], r["partition"]): r for r in json.loads((out / "geometry.json").read_text())["rows"]}
    assert set(geo) == {(m, t, p) for m in ("base", "ta__n02_s00") for t in ("count", "add")
                        for p in ("ward", "random:100")}
    for key, row in geo.items():
        c = np.array([g[key]["composer_mean"] for g in geo_runs], dtype=np.float64)
        e = np.array([g[key]["ensemble_mean"] for g in geo_runs], dtype=np.float64)
        assert row["composer_mean"] == pytest.approx(c.mean(), abs=1e-12)
        assert row["ensemble_sd"] == pytest.approx(e.std(ddof=1), abs=1e-12)
        assert row["delta_mean"] == pytest.approx((c - e).mean(), abs=1e-12)
        assert row["delta_sd"] == pytest.approx((c - e).std(ddof=1), abs=1e-12)
        for g in geo_runs:  # per run: mean over head seeds of per-seed deltas
            assert g[key]["delta_mean"] == pytest.approx(np.mean(json.loads(g[key]["delta_per_seed"])), abs=1e-6)
    # Ward on the router's (the base's) class means, by scipy in float64, against the partition the run used
    tasks, _ = load_probe_tasks(load_suite(suite))
    cache = runs[0] / "probe" / "probe_mini" / "features"
    routed = features_for(info["base"], fingerprint_model(info["base"]), tasks, cache)
    plan = json.loads((runs[0] / "plan.json").read_text())
    merged = next(e["path"] for e in plan["entries"] if e["model_id"] == "ta__n02_s00")
    backbone = features_for(merged, fingerprint_model(merged), tasks, cache)
    for name, task in tasks.items():
        z = routed[name]["train"]["features"].double().numpy()
        y = routed[name]["train"]["labels"].numpy()
        classes = sorted(set(y.tolist()))
        means = np.stack([z[y == c].mean(0) for c in classes])
        cluster = fcluster(linkage(means, method="ward"), t=2, criterion="maxclust")
        want = {frozenset(task.labels[classes[i]] for i in np.flatnonzero(cluster == k)) for k in (1, 2)}
        got = json.loads(geo_runs[0][("ta__n02_s00", task.label, "ward")]["class_sets"])
        assert {frozenset(s) for s in got} == want
    # one composer cell, recomputed: the same head experts, routing and masking in a float64 loop
    name, task = "demo_probe_add", tasks["demo_probe_add"]
    row = geo_runs[0][("ta__n02_s00", "add", "ward")]
    parts = [[task.labels.index(x) for x in s] for s in json.loads(row["class_sets"])]
    d, r = backbone[name], routed[name]
    heads = []
    for t, cs in enumerate(parts):
        keep_tr, keep_va = torch.isin(d["train"]["labels"], torch.tensor(cs)), torch.isin(d["validation"]["labels"],
                                                                                         torch.tensor(cs))
        val = ((d["validation"]["features"][keep_va], d["validation"]["labels"][keep_va]) if bool(keep_va.any())
               else (d["train"]["features"][keep_tr], d["train"]["labels"][keep_tr]))
        heads.append(fit_head((d["train"]["features"][keep_tr], d["train"]["labels"][keep_tr]), val,
                              len(task.labels), 0 + t, HeadSettings())[0])
    with torch.no_grad():
        logits = np.stack([h(d["test"]["features"]).double().numpy() for h in heads])
    rz, ry = r["train"]["features"].double().numpy(), r["train"]["labels"].numpy()
    cents = [rz[np.isin(ry, cs)].mean(0) for cs in parts]
    correct = 0
    for b, q in enumerate(r["test"]["features"].double().numpy()):
        s = [q @ c / (np.linalg.norm(q) * np.linalg.norm(c)) for c in cents]
        chosen = sorted(range(len(parts)), key=lambda t: -s[t])[:3]
        w = {t: math.exp(s[t]) / sum(math.exp(s[u]) for u in chosen) for t in chosen}
        z = [sum(w[t] * logits[t, b, c] for t in chosen if c in parts[t]) if any(c in parts[t] for t in chosen)
             else -1e9 for c in range(len(task.labels))]
        correct += int(np.argmax(z) == int(d["test"]["labels"][b]))
    assert json.loads(row["composer_per_seed"])[0] == pytest.approx(correct / len(d["test"]["labels"]), abs=1e-6)
    text = (out / "geometry.md").read_text()
    assert "Tables 2 and 7" in text and "2 subset draws" in text and "Tables 5-6" in (out / "seeds.md").read_text()
    assert (out / "geometry_fig2.png").stat().st_size > 0 and (out / "geometry_fig2.svg").stat().st_size > 0
    assert main(["analyze", "probe", str(runs[0]), str(runs[0]), "--suite", suite]) == 2  # one model seed twice
    assert main(["analyze", "probe", str(runs[0]), "--suite", suite, "--partitions", "wrd"]) == 2


def test_probe_joint_reference_is_trained_with_the_familys_pinned_kernels(family, tmp_path):
    """Built from a caller running scalar ATen kernels and MKL capped to SSE4.2, the probe folder (joint reference
    included) is file for file the one the default build made: the pins decide, as for the family itself."""
    import os
    import shutil
    import subprocess
    import sys

    from wildmerge.families import kernels

    if kernels.level("WILDMERGE_NO_SUCH") != "avx2" or os.environ.get("WILDMERGE_DEMO_KERNELS"):
        pytest.skip("the pinned probe needs an x86-64 CPU with AVX2 and the default kernels")
    info, probe, _ = family
    record = json.loads(Path(probe["manifest"]).read_text())
    assert record["kernels"] == {"level": "avx2", "aten": "AVX2", "mkl_cbwr": "COMPATIBLE"}
    copy = tmp_path / Path(info["root"]).name
    shutil.copytree(info["root"], copy)
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
           "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    code = ("import json, sys; from wildmerge.families.demo.probe_data import ensure_probe_data; "
            "info = {**json.loads(sys.argv[1]), 'root': sys.argv[2], 'manifest': sys.argv[2] + '/family.json', "
            "'base': sys.argv[2] + '/base'}; print(json.dumps(ensure_probe_data(info, progress=False)))")
    res = subprocess.run([sys.executable, "-c", code, json.dumps(info), str(copy)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    again = json.loads(Path(json.loads(res.stdout.strip().splitlines()[-1])["manifest"]).read_text())
    assert again["files"] == record["files"]
