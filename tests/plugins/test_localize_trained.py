"""The trained Localize-and-Stitch (He et al. 2024, "Localize-and-Stitch: Efficient Model Merging via Sparse Task
Arithmetic"): against a float64 implementation written here from the paper (the same Adam steps from the same
init, by hand, one sequence at a time), its invariants, its errors, and the shipped recipe through the stock
``mergekit-yaml`` on the demo family."""

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import one_thread, run_mergekit_yaml, token_family  # noqa: F401  (one_thread: autouse fixture)
from safetensors.torch import load_file

from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE, merge_layerwise
from wildmerge.plugins.localize_stitch import localize_stitch

N_SAMPLES, SEQ = 6, 12
# lr * steps beyond init_logit: masks cross the initial boundary, so training changes the binarised mask
TRAIN = {"steps": 4, "lr": 0.3, "l1": 1e-3, "density": 0.3, "init_logit": 0.5}


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """A tiny Llama base and two experts of it, each with its own token data from its own slice of the vocabulary."""
    return token_family(tmp_path_factory.mktemp("localize_trained"), [(4, 30), (30, 64)], N_SAMPLES, SEQ)


def _recipe(fam, params, experts=None, data=None):
    experts = fam["experts"] if experts is None else experts
    data = fam["data"] if data is None else data
    return {"merge_method": "localize_stitch_trained", "base_model": fam["base"], "parameters": params,
            # one batch of every sequence: the reference runs them one at a time, without padding
            "calibration": {"n_samples": N_SAMPLES, "seq_len": SEQ, "batch_size": N_SAMPLES},
            "models": [{"model": e, "calibration": d} for e, d in zip(experts, data)]}


def _merge(fam, params, name, **kw):
    out = merge_layerwise(_recipe(fam, params, **kw), fam["root"] / name, device="cpu", progress=False)
    return load_file(str(Path(out) / "model.safetensors")), json.loads((Path(out) / DIAGNOSTICS_FILE).read_text())


def _weights(path):
    return load_file(str(Path(path) / "model.safetensors"))


# ---- the float64 reference, from the paper -----------------------------------------------------------------------


def _top(values, density):
    """0 / 1 masks of the int(density * N) largest entries over all tensors (a sort and a threshold)."""
    flat = torch.cat([v.flatten() for v in values])
    k = max(1, int(density * flat.numel()))
    threshold = flat.sort(descending=True).values[k - 1]
    assert int((flat >= threshold).sum()) == k, "a tie across the threshold: pick other test settings"
    return [v >= threshold for v in values]


def _reference(base, expert, data, steps, lr, l1, density, init_logit, binarize="top_density"):
    """He et al.'s Localize in float64: S init +/- init_logit on the top density of |tau|; Adam (Kingma & Ba, with
    torch's defaults beta = (0.9, 0.999), eps = 1e-8) on CE(theta_0 + sigmoid(S) tau) + l1 * sum sigmoid(S), CE the
    mean next-token negative log-likelihood over every token of every sequence; then the binary mask."""
    from torch.func import functional_call
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float64).eval()
    names = [n for n, _ in model.named_parameters()]
    theta0 = [p.detach().clone() for _, p in model.named_parameters()]
    tuned = dict(AutoModelForCausalLM.from_pretrained(expert, dtype=torch.float64).named_parameters())
    tau = [tuned[n].detach() - t for n, t in zip(names, theta0)]
    scores = [torch.where(m, init_logit, -init_logit).double() for m in _top([t.abs() for t in tau], density)]
    seqs = [json.loads(line)["input_ids"] for line in open(data)]
    m1 = [torch.zeros_like(s) for s in scores]
    m2 = [torch.zeros_like(s) for s in scores]
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, steps + 1):
        s_req = [s.clone().requires_grad_() for s in scores]
        params = {n: p + torch.sigmoid(s) * d for n, p, s, d in zip(names, theta0, s_req, tau)}
        nll, count = 0.0, 0
        for seq in seqs:
            logp = torch.log_softmax(functional_call(model, params, (torch.tensor([seq]),)).logits[0], dim=-1)
            nll = nll - sum(logp[i, seq[i + 1]] for i in range(len(seq) - 1))
            count += len(seq) - 1
        loss = nll / count + l1 * sum(torch.sigmoid(s).sum() for s in s_req)
        grads = torch.autograd.grad(loss, s_req)
        for j, g in enumerate(grads):
            m1[j] = b1 * m1[j] + (1 - b1) * g
            m2[j] = b2 * m2[j] + (1 - b2) * g * g
            step = lr * (m1[j] / (1 - b1 ** t)) / ((m2[j] / (1 - b2 ** t)).sqrt() + eps)
            scores[j] = scores[j] - step
    mask = [s > 0 for s in scores] if binarize == "sigmoid" else _top(scores, density)
    return names, theta0, tau, mask


def _stitch(theta0, taus, masks):
    """Stitch (the paper's gamma' = gamma / sum gamma): theta_0 + sum_t m_t tau_t / max(1, sum_t m_t)."""
    out = []
    for j, t0 in enumerate(theta0):
        claims = sum(m[j].double() for m in masks)
        out.append(t0 + sum(m[j].double() * tau[j] for m, tau in zip(masks, taus)) / claims.clamp(min=1))
    return out


@pytest.mark.parametrize("steps,binarize", [(0, "top_density"), (4, "top_density"), (4, "sigmoid")])
def test_merge_matches_float64_reference(family, steps, binarize):
    params = dict(TRAIN, steps=steps, binarize=binarize)
    out, diag = _merge(family, params, f"ref_{steps}_{binarize}")
    refs = [_reference(family["base"], e, d, **params) for e, d in zip(family["experts"], family["data"])]
    names, theta0 = refs[0][0], refs[0][1]
    expected = _stitch(theta0, [r[2] for r in refs], [r[3] for r in refs])
    assert set(out) == set(names)
    for n, want in zip(names, expected):
        torch.testing.assert_close(out[n].double(), want, rtol=0, atol=2e-6)
    if steps:  # training moved the masks away from the initial top share of |tau|
        assert all(r["changed_from_init"] > 0 for r in diag["experts"])
    else:
        assert all(r["changed_from_init"] == 0 for r in diag["experts"])


def test_one_expert_gives_base_plus_its_masked_task_vector_at_the_stated_density(family):
    out, diag = _merge(family, dict(TRAIN, density=0.2), "one", experts=family["experts"][:1],
                       data=family["data"][:1])
    base, expert = _weights(family["base"]), _weights(family["experts"][0])
    total = sum(t.numel() for t in base.values())
    changed = {n: out[n] != base[n] for n in base}
    assert sum(int(c.sum()) for c in changed.values()) == int(0.2 * total)  # the stated density, exactly
    for n in base:
        torch.testing.assert_close(out[n][changed[n]], expert[n][changed[n]], rtol=0, atol=1e-6)
    assert diag["experts"][0]["mask_share"] == int(0.2 * total) / total and diag["overlap_share"] == 0


def test_density_one_is_task_arithmetic_stitched(family):
    """Every mask all ones: each entry is claimed by both experts, so the merge is theta_0 + mean of tau (TA at
    lambda 1 averaged by the Stitch), and equals the dataless kernel at density 1."""
    out, diag = _merge(family, dict(TRAIN, density=1.0), "dense")
    base = _weights(family["base"])
    experts = [_weights(e) for e in family["experts"]]
    for n in base:
        taus = [e[n].double() - base[n].double() for e in experts]
        torch.testing.assert_close(out[n].double(), base[n].double() + sum(taus) / 2, rtol=0, atol=1e-6)
        torch.testing.assert_close(out[n], base[n] + localize_stitch([e[n] - base[n] for e in experts], 1.0),
                                   rtol=0, atol=1e-6)
    assert all(r["mask_share"] == 1.0 for r in diag["experts"]) and diag["overlap_share"] == 1.0


def test_the_merge_is_deterministic(family):
    first, _ = _merge(family, TRAIN, "det_a")
    second, _ = _merge(family, TRAIN, "det_b")
    assert all(torch.equal(first[n], second[n]) for n in first)


def test_training_lowers_the_task_loss(family):
    _, diag = _merge(family, dict(TRAIN, steps=8, lr=0.1, l1=0.0), "loss")
    for row in diag["experts"]:
        assert math.isfinite(row["task_loss_start"]) and row["task_loss_end"] < row["task_loss_start"]


# ---- errors, before any work -------------------------------------------------------------------------------------


@pytest.mark.parametrize("params,message", [
    ({"density": 0.0}, "parameter 'density' = 0.0 is out of range"),
    ({"steps": -1}, "parameter 'steps' = -1 is out of range"),
    ({"lr": float("nan")}, "parameter 'lr'"),
    ({"init_logit": 0.0}, "parameter 'init_logit' = 0.0 is out of range"),
    ({"binarize": "round"}, "parameter 'binarize' = 'round' is invalid"),
    ({"fisher_samples": 4}, "unknown parameter 'fisher_samples' for localize_stitch_trained"),
])
def test_bad_parameters_fail_before_any_work(family, tmp_path, params, message):
    with pytest.raises(WildmergeError, match=message):
        merge_layerwise(_recipe(family, params), tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()


def test_an_expert_without_data_fails_before_any_work(family, tmp_path):
    recipe = _recipe(family, TRAIN)
    recipe["models"][1]["calibration"] = None
    with pytest.raises(ConfigError, match="has no calibration data: the data-based methods .* trained "
                                          "Localize-and-Stitch"):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()


def test_it_needs_a_base(family, tmp_path):
    recipe = _recipe(family, TRAIN)
    del recipe["base_model"]
    with pytest.raises(ConfigError, match="localize_stitch_trained trains masks on task vectors"):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)


def test_the_pre_flight_names_the_method_for_an_expert_without_data():
    from wildmerge.expert_data.check import missing_data
    from wildmerge.expert_data.schema import parse_data

    lines = missing_data({"a": parse_data("demo:unlabelled/expert_01", "a"), "b": None}, ["localize_stitch_trained"])
    assert len(lines) == 1 and lines[0].startswith("localize_stitch_trained needs each expert's text data; none for b")


# ---- the shipped recipe, through the stock mergekit-yaml, on the demo family ---------------------------------------


def test_stock_mergekit_yaml_runs_the_shipped_recipe_on_the_demo_family(tmp_path):
    from transformers import AutoModelForCausalLM

    from wildmerge.families.demo.family import ensure_family
    from wildmerge.recipes.render import render_recipe

    demo = ensure_family(seed=0, quick=True, progress=False)  # the shared cache (~/.cache/wildmerge/demo)
    names = sorted(demo["experts"])[:2]
    recipe = render_recipe("localize_stitch_trained", demo["base"], [demo["experts"][n] for n in names], {})
    recipe["parameters"]["steps"] = 4  # the recipe's other settings as shipped; 4 steps keep the test short
    recipe["calibration"].update(n_samples=16, seq_len=32)
    for m, n in zip(recipe["models"], names):
        m["calibration"] = str(Path(demo["root"]) / "calibration" / f"{n}.jsonl")
    diag = run_mergekit_yaml(recipe, tmp_path)
    assert diag["method"] == "localize_stitch_trained" and len(diag["experts"]) == 2
    merged, base = _weights(tmp_path / "out"), _weights(demo["base"])
    total = sum(t.numel() for t in base.values())
    changed = sum(int((merged[n] != base[n]).sum()) for n in base)
    assert 0 < changed <= 2 * int(0.1 * total)  # two masks of the shipped density, stitched
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"))
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.tensor([[1, 2, 3]])).logits).all()
