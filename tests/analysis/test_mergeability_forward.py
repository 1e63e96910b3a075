"""Activation and gradient mergeability metrics (Zhou et al., arXiv 2601.22285, §3.4-3.5) on tiny real models,
against a float64 reference that runs every item alone (no batching, no padding, HF's own loss), and the
bad-input checks that come before any model is loaded."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from helpers import make_lm
from wildmerge.analysis.mergeability.compute import MetricSettings, compute_metrics
from wildmerge.analysis.mergeability.data import DataSettings
from wildmerge.analysis.mergeability.registry import GROUPS
from wildmerge.errors import ConfigError

ITEMS = {
    "e0": [{"prompt": "The sky is", "answer": "blue"}, {"prompt": "Fire is", "answer": "hot"},
           {"prompt": "Ice is", "answer": "cold"}],
    "e1": [{"prompt": "Two plus two is", "answer": "four"}, {"prompt": "1 plus 1 equals", "answer": "2"},
           {"prompt": "2 plus 3 equals", "answer": "5"}],
}
MAX_LEN = 16


@pytest.fixture(scope="module")
def lms(tmp_path_factory):
    root = tmp_path_factory.mktemp("mergeability_forward")
    base = make_lm(root / "base")
    return {"base": base, "experts": {f"e{i}": make_lm(root / f"e{i}", base=base, seed=i + 1, noise=0.05)
                                      for i in range(2)}}


def _ids(tok, item):
    prompt = tok(item["prompt"])["input_ids"]
    answer = tok(" " + item["answer"], add_special_tokens=False)["input_ids"]
    return torch.tensor([prompt + answer]), torch.tensor([[-100] * len(prompt) + answer])


def _reference(path, tok, own, pooled):
    """(mean activation, encoder gradient, input gradient) of one model, float64, item by item."""
    from transformers import AutoModelForCausalLM

    pre_norm = AutoModelForCausalLM.from_pretrained(path).double()
    pre_norm.model.norm = torch.nn.Identity()  # hidden_states[-1] is then the last block's output before the norm
    acts = []
    with torch.no_grad():
        for it in pooled:
            ids, _ = _ids(tok, it)
            acts.append(pre_norm(ids, output_hidden_states=True).hidden_states[-1][0, 1:].mean(0))
    model = AutoModelForCausalLM.from_pretrained(path).double()
    params = [p for n, p in model.named_parameters() if not n.startswith("lm_head")]
    losses = [model(ids, labels=labels).loss for ids, labels in (_ids(tok, it) for it in own)]
    enc = torch.autograd.grad(torch.stack(losses).mean(), params)
    inp = []
    for it in pooled:
        ids, labels = _ids(tok, it)
        e = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        (g,) = torch.autograd.grad(model(inputs_embeds=e, labels=labels).loss, e)
        inp.append(torch.cat([g[0], torch.zeros(MAX_LEN - g.shape[1], g.shape[2], dtype=g.dtype)]))
    return (torch.stack(acts).mean(0).numpy(), torch.cat([g.reshape(-1) for g in enc]).numpy(),
            torch.cat(inp).reshape(-1).numpy() / len(pooled))


def _vec(x, y, prefix, ratio=False):
    out = {f"{prefix}_cosine_similarity": x @ y / (np.linalg.norm(x) * np.linalg.norm(y)),
           f"{prefix}_l2_distance": np.linalg.norm(x - y), f"{prefix}_dot_product": x @ y}
    if ratio:
        out[f"{prefix}_magnitude_ratio"] = min(np.linalg.norm(x), np.linalg.norm(y)) / max(np.linalg.norm(x),
                                                                                          np.linalg.norm(y))
    return out


def test_activation_and_gradient_metrics_match_float64_reference(lms):
    from transformers import AutoTokenizer

    settings = MetricSettings(groups=["activations", "gradients"],
                              data=DataSettings(n_own=3, n_pooled=3, max_len=MAX_LEN, batch_size=2))
    df, side = compute_metrics(lms["base"], lms["experts"], ITEMS, settings, progress=False)
    assert list(df.columns[3:]) == GROUPS["activations"] + GROUPS["gradients"]
    tok = AutoTokenizer.from_pretrained(lms["base"])
    pooled = ITEMS["e0"] + ITEMS["e1"]
    (a0, g0, i0), (a1, g1, i1) = (_reference(lms["experts"][e], tok, ITEMS[e], pooled) for e in ("e0", "e1"))
    ref = {**_vec(a0, a1, "activation", ratio=True), **_vec(g0, g1, "encoder_gradient"),
           **_vec(i0, i1, "input_gradient")}
    row = df.iloc[0]
    for metric, value in ref.items():
        assert row[metric] == pytest.approx(value, rel=2e-4, abs=1e-7), metric
    assert -1 <= row["encoder_gradient_cosine_similarity"] <= 1 and math.isfinite(row["input_gradient_dot_product"])


def test_bad_input_is_refused_before_any_model_loads(lms):
    unlabelled = {"e0": [{"prompt": "The sky is blue", "answer": ""}], "e1": ITEMS["e1"]}
    with pytest.raises(ConfigError, match="labelled items.*e0"):
        compute_metrics(lms["base"], lms["experts"], unlabelled, MetricSettings(groups=["gradients"]), progress=False)
    with pytest.raises(ConfigError, match="calibration items; none for \\['e1'\\]"):
        compute_metrics(lms["base"], lms["experts"], {"e0": ITEMS["e0"]}, MetricSettings(groups=["activations"]),
                        progress=False)
    with pytest.raises(ConfigError, match="at least 2 experts"):
        compute_metrics(lms["base"], {"e0": lms["experts"]["e0"]}, ITEMS, progress=False)
    # activations alone accept unlabelled text
    df, _ = compute_metrics(lms["base"], lms["experts"], unlabelled, MetricSettings(groups=["activations"]),
                            progress=False)
    assert df["activation_cosine_similarity"].between(-1, 1).all()


def test_seconds_per_category_of_metric(lms, tmp_path):
    """The paper's Table 10 for one computation: each category asked for, what it reads, its paper cost class and
    its seconds, which add up to the phases' own (the weight pass = task vector + its SVD sketches; the forward
    phase's activation and gradient passes); a second computation from the cache takes no pass."""
    from wildmerge.analysis.mergeability.io import write_metrics
    from wildmerge.analysis.mergeability.registry import CATEGORIES

    settings = MetricSettings(data=DataSettings(n_own=2, n_pooled=2, max_len=MAX_LEN, batch_size=2))
    df, side = compute_metrics(lms["base"], lms["experts"], ITEMS, settings, cache_dir=str(tmp_path / "cache"),
                               progress=False)
    table = {r["category"]: r for r in side["category_cost"]}
    assert list(table)[:5] == list(CATEGORIES) and "(expert loads for the forward passes, shared)" in table
    assert {c: table[c]["metrics"] for c in CATEGORIES} == {c: len(m) for c, m in CATEGORIES.items()}
    assert table["gradient"]["paper_cost"] == "high" and table["task_vector"]["reads"] == "weights only"
    assert table["gradient"]["reads"].startswith("labelled")
    fwd, sec = side["forward"]["seconds"], side["seconds"]
    assert table["task_vector"]["seconds"] + table["subspace"]["seconds"] == pytest.approx(sec["weights"], abs=2e-2)
    assert table["effective_rank"]["seconds"] == table["subspace"]["seconds"] == pytest.approx(sec["weights_svd"],
                                                                                               abs=1e-3)
    assert table["gradient"]["seconds"] == pytest.approx(fwd["input"] + fwd["encoder"] + fwd["gradient_grams"],
                                                         abs=2e-3)
    assert table["activation"]["seconds"] == pytest.approx(fwd["activation"], abs=1e-3) and fwd["load"] > 0
    written = write_metrics(df, side, tmp_path / "out")
    csv = pd.read_csv(tmp_path / "out" / "category_cost.csv")
    assert tmp_path / "out" / "category_cost.csv" in written and csv["category"].tolist() == list(table)
    _, again = compute_metrics(lms["base"], lms["experts"], ITEMS, settings, cache_dir=str(tmp_path / "cache"),
                               progress=False)
    assert again["forward"]["seconds"]["load"] == 0 and again["seconds"]["weights_svd"] == 0
