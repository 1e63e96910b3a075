"""FLOPs, memory and seconds of every data-based merge (the Chain of Merges paper's Fig. 5, extended): a real small
run of RegMean, CoM, MaTS, Fisher, ProDistill, the trained Localize-and-Stitch, AdaMerging and AdaMerging++ on
helpers' tiny family, its report's table against counts written here in float64 from the config and the run's own
records."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers import lm_family  # noqa: F401
from report_fixtures import fabricate_results
from wildmerge.analysis.report.write import write_report
from wildmerge.cli import main
from wildmerge.run import RunFolder

METHODS = ["regmean", "com", "mats", "fisher", "prodistill", "localize_stitch_trained", "adamerging", "adamerging_pp"]


@pytest.fixture(scope="module")
def run(lm_family, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("compute")
    experts = []
    for i, path in enumerate(lm_family["experts"][:2]):  # 64 texts each: the methods' default calibration size
        (root / f"texts{i}.jsonl").write_text("".join(json.dumps({"text": f"{j} plus {i} equals {i + j} and more"})
                                                      + "\n" for j in range(70)))
        experts.append({"model": path, "name": f"e{i}", "calibration": str(root / f"texts{i}.jsonl")})
    pool = str(root / "pool.yml")
    (root / "pool.yml").write_text(yaml.safe_dump({"name": "tiny", "base": {"model": lm_family["base"]},
                                                   "experts": experts}))
    out = root / "run"
    assert main(["sample", "--pool", pool, "--methods", ",".join(METHODS), "--sizes", "2", "--k", "1",
                 "--no-evaluate", "--out", str(out)]) == 0
    ids = [e.model_id for e in RunFolder(out).read_plan().entries]
    fabricate_results(out, {m: (0.5, 0.5) for m in ids})
    return out, write_report(out)


def _counts64(cfg: dict, diag: dict) -> tuple:
    """(FLOPs, bytes) from the paper-style rules, recomputed from the config dict by hand."""
    h, inter, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    groups = [(h, [heads * hd, kv * hd, kv * hd]), (heads * hd, [h]), (h, [inter, inter]), (inter, [h])]
    lin = [sum(2.0 * d * o for o in outs) for d, outs in groups]
    block = sum(lin)
    model = L * block + 2.0 * h * V
    weights = sum(d * o for d, outs in groups for o in outs) + 2 * h
    P = V * h + L * weights + h + (0 if cfg.get("tie_word_embeddings") else h * V)
    cal, p, method = diag["calibration"], diag["parameters"], diag["method"]
    n, T = len(cal), sum(c["tokens"] for c in cal)
    grams = L * T * sum(2.0 * d * d for d, _ in groups)
    if method in ("regmean", "chain_of_merges", "mats"):
        diag_passes = 1 + bool(p.get("diagnostics", True))
        if method == "chain_of_merges":
            partial = sum(sum(lin[:i]) for i in range(4))
            forward = L * T * (partial + block * diag_passes)
            memory = n * max(d * d for d, _ in groups) * 4
        else:
            forward = L * T * block * diag_passes
            memory = n * sum(d * d for d, _ in groups) * 4
        if method == "mats":
            solve = L * sum(2.0 * o * d * d * (n + p["iterations"]) for d, outs in groups for o in outs)
        else:
            solve = L * sum(2.0 * n * o * d * d + 2.0 * d ** 3 / 3 for d, outs in groups for o in outs)
        return forward + grams + solve, memory

    def used(c, limit):
        return c["tokens"] if limit >= c["samples"] else round(c["tokens"] * limit / c["samples"])

    if method == "fisher":
        return 3 * model * sum(used(c, p["fisher_samples"]) for c in cal), 5 * P * 4
    if method == "prodistill":
        t = sum(used(c, p["samples"]) for c in cal)
        return L * t * block * (2 + 3 * p["steps"]), (n + 1) * weights * 4 + 2 * t * h * 4
    if method in ("adamerging", "adamerging_pp"):  # every step: samples_per_step texts of each expert (mean length)
        texts = sum(p["iterations"] * min(p["samples_per_step"], c["samples"]) * c["tokens"] / c["samples"]
                    for c in cal)
        return 3 * model * texts, (n + 2) * P * 4
    assert method == "localize_stitch_trained"
    per_step = [c["tokens"] / -(-c["samples"] // c["batch_size"]) for c in cal]
    return 3 * model * sum(p["steps"] * s for s in per_step), 7 * P * 4


def test_every_data_based_merge_is_counted_and_timed_from_its_records(run, lm_family):  # noqa: F811
    out, written = run
    table = pd.read_csv(written["merge_compute_csv"]).set_index("model_id")
    cfg = json.loads((Path(lm_family["base"]) / "config.json").read_text())
    merges = [e for e in RunFolder(out).read_plan().entries if e.kind == "merge"]
    assert len(table) == len(merges) == len(METHODS)
    for e in merges:
        diag = json.loads((Path(e.path) / "layerwise_diagnostics.json").read_text())
        info = json.loads((Path(e.path) / "merge_info.json").read_text())
        flops, memory = _counts64(cfg, diag)
        row = table.loc[e.model_id]
        assert row["flops"] == pytest.approx(flops, rel=1e-9), diag["method"]
        assert row["memory_bytes"] == pytest.approx(memory, rel=1e-9), diag["method"]
        assert row["seconds"] == pytest.approx(info["seconds"]) and row["peak_rss_mib"] == diag["peak_rss_mib"]
        assert row["tokens"] == sum(c["tokens"] for c in diag["calibration"]) and row["experts"] == 2
    md = Path(written["leaderboard_md"]).read_text()
    assert "Compute and memory of the data-based merges" in md and "Fisher" in md
    assert Path(written["merge_compute_png"]).stat().st_size > 0


def test_adamerging_is_counted_from_its_settings(lm_family):  # noqa: F811
    """AdaMerging (``tune --adamerging``, outside a run's plan): forward and backward of the whole merged model on
    ``iterations x batch_size`` sequences of ``seq_len`` tokens of each expert; the base, N task vectors and the merge
    in memory."""
    from transformers import AutoConfig

    from wildmerge.analysis.flops import count, model_flops, parameters

    config = AutoConfig.from_pretrained(lm_family["base"])
    cfg = json.loads((Path(lm_family["base"]) / "config.json").read_text())
    h, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    got = count("adamerging", config, [{"tokens": 1}] * 3, {"iterations": 5, "batch_size": 4, "seq_len": 16})
    assert got["flops"] == 3 * model_flops(config) * 3 * 5 * 4 * 16  # 3 experts
    heads = cfg["num_attention_heads"]
    kv, hd, inter = cfg.get("num_key_value_heads") or heads, cfg.get("head_dim") or h // heads, cfg["intermediate_size"]
    block = 2.0 * (h * (heads + 2 * kv) * hd + heads * hd * h + 2 * h * inter + inter * h)
    assert model_flops(config) == pytest.approx(L * block + 2.0 * h * V, rel=1e-12)
    assert got["memory_bytes"] == 5 * parameters(config) * 4
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(lm_family["base"])  # the config's count is the model's own
    assert parameters(config) == sum(p.numel() for p in model.parameters())
