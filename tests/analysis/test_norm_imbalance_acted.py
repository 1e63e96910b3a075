"""Norm imbalance acted upon (the reality-check paper, Sec. 4.3, Figs. 5-7): whom TIES's sign election follows and how
close TA's merge is to each expert as lambda grows, against float64 computations from the checkpoint files."""

import numpy as np
import pytest
from safetensors.numpy import load_file

from helpers import make_tiny_model
from wildmerge.analysis.pool.imbalance import layer_grams
from wildmerge.analysis.pool.lambda_similarity import best_lambda, plot_similarity, similarity_curves
from wildmerge.analysis.pool.sign_election import sign_election


@pytest.fixture(scope="module")
def unequal(tmp_path_factory):
    root = tmp_path_factory.mktemp("unequal")
    base = make_tiny_model(root / "base", seed=0)
    return base, {"small": make_tiny_model(root / "small", base=base, seed=1, noise=0.002),
                  "mid": make_tiny_model(root / "mid", base=base, seed=2, noise=0.004),
                  "big": make_tiny_model(root / "big", base=base, seed=3, noise=0.05)}


def taus_by_tensor(base, experts):
    b = {k: v.astype(np.float64) for k, v in load_file(f"{base}/model.safetensors").items()}
    e = [load_file(f"{p}/model.safetensors") for p in experts.values()]
    return {k: np.stack([x[k].astype(np.float64).ravel() - b[k].ravel() for x in e]) for k in b}


def ref_election(taus_by_tensor, density):
    """TIES (Yadav et al. 2023): per tensor keep the top-k |tau_t|; gamma = sign(sum); per-expert shares."""
    kept = agree = mass = decisive = sq = 0
    elected = 0
    for taus in taus_by_tensor.values():
        k = max(1, int(density * taus.shape[1]))
        hat = np.zeros_like(taus)
        for t in range(len(taus)):
            top = np.argsort(-np.abs(taus[t]), kind="stable")[:k]
            hat[t, top] = taus[t, top]
        gamma = np.sign(hat.sum(0))
        ok = (np.sign(hat) == gamma) & (hat != 0) & (gamma != 0)
        kept = kept + (hat != 0).sum(1)
        agree = agree + ok.sum(1)
        mass = mass + (np.abs(hat) * ok).sum(1)
        decisive = decisive + ((np.sign(hat.sum(0) - hat) != gamma) & (gamma != 0)).sum(1)
        elected += (gamma != 0).sum()
        sq = sq + (hat ** 2).sum(1)
    return agree / kept, mass / mass.sum(), decisive / elected, np.sqrt(sq)


@pytest.mark.parametrize("density", [1.0, 0.2])
def test_sign_election_attribution_matches_reference_and_follows_the_big_expert(unequal, density):
    base, experts = unequal
    rows = sign_election(base, experts, density=density, progress=False)
    agree, mass, decisive, norms = ref_election(taus_by_tensor(base, experts), density)
    for i, r in enumerate(rows):
        assert r["agree_share"] == pytest.approx(agree[i], rel=1e-9)
        assert r["mass_share"] == pytest.approx(mass[i], rel=1e-9)
        assert r["decisive_share"] == pytest.approx(decisive[i], rel=1e-9)
        assert r["norm"] == pytest.approx(norms[i], rel=1e-9)
    by = {r["expert"]: r for r in rows}
    assert by["big"]["mass_share"] > 0.8 and by["big"]["agree_share"] > 0.95  # the merge follows "big"
    if density == 1.0:  # untrimmed, the small experts decide almost no sign
        assert by["small"]["decisive_share"] < 0.05 < by["big"]["decisive_share"]
    else:  # trimmed per expert, entries "big" dropped are left to the others: trimming shares the election
        assert by["small"]["decisive_share"] > 0.05


def test_similarity_vs_lambda_matches_direct_computation(unequal, tmp_path):
    base, experts = unequal
    names = list(experts)
    rows = similarity_curves(layer_grams(base, experts, progress=False)["model"], names, lambdas=(0.0, 0.3, 1.0))
    taus = taus_by_tensor(base, experts)
    flat = np.concatenate([t for t in taus.values()], axis=1)  # [T, all parameters]
    total = flat.sum(0)
    for r in rows:
        t = names.index(r["expert"])
        direct = 1 - np.linalg.norm(r["lambda"] * total - flat[t]) / np.linalg.norm(flat[t])
        assert r["similarity"] == pytest.approx(direct, rel=1e-9, abs=1e-12)
    assert [r["similarity"] for r in rows if r["lambda"] == 0.0] == pytest.approx([0.0] * 3)  # the base
    best = best_lambda(similarity_curves(layer_grams(base, experts, progress=False)["model"], names))
    assert best["big"] >= 0.9 and best["small"] <= 0.05  # no single lambda suits every expert (Fig. 5 right)
    written = plot_similarity(rows, tmp_path)
    assert all(p.is_file() for p in written.values())


def test_balanced_and_unbalanced_subsets_and_their_comparison(unequal):
    import pandas as pd

    from wildmerge.analysis.pool.balance import balance_scorer, balance_table, expert_norms, subset_imbalance
    from wildmerge.planning.sampler import top_subsets

    base, experts = unequal
    norms = expert_norms(base, experts, progress=False)
    flat = taus_by_tensor(base, experts)
    for i, name in enumerate(experts):
        assert norms[name] == pytest.approx(np.sqrt(sum((t[i] ** 2).sum() for t in flat.values())), rel=1e-9)
    names = list(experts)
    balanced = top_subsets(names, sizes=[2], k=1, score=balance_scorer(norms, balanced=True), full=False)
    unbalanced = top_subsets(names, sizes=[2], k=1, score=balance_scorer(norms, balanced=False), full=False)
    pair = lambda draw: sorted(next(s.experts for s in draw.subsets if s.n == 2))  # noqa: E731
    assert pair(balanced) == ["mid", "small"] and pair(unbalanced) == ["big", "small"]
    assert subset_imbalance(norms, ["big", "small"]) == pytest.approx(norms["big"] / norms["small"])
    df = pd.DataFrame([{"kind": "merge", "method_label": "TA", "n": 2, "experts": e, "status": "ok", "mean": m}
                       for e, m in [("small;mid", 60.0), ("small;big", 40.0), ("mid;big", 44.0)]])
    (row,) = balance_table(df, norms)
    # ratios ~2 (small, mid), ~12 (mid, big), ~25 (small, big): the median splits off the last one
    assert row["balanced_mean"] == pytest.approx(52.0) and row["unbalanced_mean"] == pytest.approx(40.0)
    assert row["diff_pp"] == pytest.approx(12.0) and row["balanced_ratio"] < row["unbalanced_ratio"]


@pytest.mark.parametrize("select,pair", [("balanced", ["mid", "small"]), ("unbalanced", ["big", "small"])])
def test_sample_select_balanced_and_unbalanced(unequal, tmp_path, select, pair):
    from wildmerge.cli import main
    from wildmerge.run import RunFolder

    base, experts = unequal
    lines = ["name: unequal", f"base: {{model: {base}}}", "experts:"]
    lines += [f"  - {{model: {p}, name: {n}}}" for n, p in experts.items()]
    (tmp_path / "pool.yml").write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    assert main(["sample", "--base", str(tmp_path / "pool.yml"), "--out", str(run), "--sizes", "2", "--k", "1",
                 "--methods", "ta", "--select", select, "--no-evaluate"]) == 0
    manifest = RunFolder(run).read_manifest()
    assert [sorted(s.experts) for s in manifest.subsets if s.n == 2] == [pair]
    record = manifest.sampling["select"]
    assert record["prefer"] == select and set(record["norms"]) == set(experts)
    # the manifest (and the dry run) say the norms chose the subsets, not a mergeability predictor
    assert any(f"norm balance (the k most {select}" in note for note in manifest.notes)
    assert not any("predictor" in note for note in manifest.notes)


def test_analyze_norms_writes_similarity_and_sign_election(unequal, tmp_path):
    import pandas as pd

    from wildmerge.cli import main

    base, experts = unequal
    lines = ["name: unequal", f"base: {{model: {base}}}", "experts:"]
    lines += [f"  - {{model: {p}, name: {n}}}" for n, p in experts.items()]
    (tmp_path / "pool.yml").write_text("\n".join(lines) + "\n")
    out = tmp_path / "norms"
    assert main(["analyze", "norms", "--pool", str(tmp_path / "pool.yml"), "--out", str(out),
                 "--sign-election", "1"]) == 0
    curves = pd.read_csv(out / "similarity_vs_lambda.csv")
    assert set(curves["expert"]) == set(experts) and (out / "similarity_vs_lambda.png").is_file()
    election = pd.read_csv(out / "sign_election.csv").set_index("expert")
    assert election.loc["big", "mass_share"] > 0.8
