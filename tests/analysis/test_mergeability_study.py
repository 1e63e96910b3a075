"""The predictor's robustness studies (Zhou et al. 2026, "Demystifying Mergeability", Tables 3, 4, 11-15, 19, Figs. 3
and 6) on a small planted fixture: the numbers checked against float64 computations written here from the paper."""

import itertools

import numpy as np
import pandas as pd
import pytest

from wildmerge.analysis.mergeability import predictor as PR
from wildmerge.analysis.mergeability.fitting import fit_methods
from wildmerge.analysis.mergeability.study import plot_nonzero_frequency, readme, run_study, tables

EXPERTS = [f"x{i}" for i in range(7)]
PAIRS = list(itertools.combinations(EXPERTS, 2))
COLS = ["task_vector_cosine_similarity", "task_vector_l2_distance", "subspace_overlap",  # in the registry's order
        "right_subspace_overlap_top_k", "encoder_gradient_l2_distance", "input_gradient_cosine_similarity"]
GRAD, SUB = "encoder_gradient_l2_distance", "right_subspace_overlap_top_k"


def _fixture():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(len(PAIRS), len(COLS))) * rng.uniform(0.1, 10, len(COLS))
    df = pd.DataFrame(m, columns=COLS)
    df.insert(0, "expert_b", [b for _, b in PAIRS])
    df.insert(0, "expert_a", [a for a, _ in PAIRS])
    z = (m - m.mean(0)) / m.std(0)
    g, s = z[:, COLS.index(GRAD)], z[:, COLS.index(SUB)]
    noise = 0.05 * rng.normal(size=(2, len(PAIRS)))
    targets = pd.concat([pd.DataFrame({"method": meth, "expert_a": df["expert_a"], "expert_b": df["expert_b"],
                                       "target": y}) for meth, y in
                         [("wa", -2.0 * g + 1.0 * s + noise[0]), ("ties", -1.0 * g + 2.0 * s + noise[1])]])
    return df, targets.reset_index(drop=True)


@pytest.fixture(scope="module")
def study():
    df, targets = _fixture()
    return df, targets, run_study(df, targets, profile="paper", seeds=[0, 1], progress=False)


def _pearson64(a, b):
    a, b = np.asarray(a, np.float64) - np.mean(a), np.asarray(b, np.float64) - np.mean(b)
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def test_validation_r_matches_an_independent_pearson(study):
    df, targets, s = study
    assert s["metrics"] == COLS
    fold = s["main"]["methods"]["wa"]["folds"][0]
    held = fold["held_out"]
    sub = targets[targets["method"] == "wa"].reset_index(drop=True)
    X = df[COLS].to_numpy(np.float64)
    tr = np.array([held not in p for p in PAIRS])
    lo, hi = X[tr].min(0), X[tr].max(0)
    pred = (2 * (X[~tr] - lo) / (hi - lo) - 1) @ np.array(fold["w"])
    assert fold["r_val"] == pytest.approx(_pearson64(pred, sub["target"][~tr]), abs=1e-12)
    # the Pearson objective at the fitted w (Eq. 7) beats w = 0's (which is lambda * 0 = 0 minus an undefined r)
    Xtr = 2 * (X[tr] - lo) / (hi - lo) - 1
    w = np.array(fold["w"])
    assert -_pearson64(Xtr @ w, sub["target"][tr]) + np.abs(w).sum() < 0


def test_nonzero_frequency_is_counted_over_folds_and_seeds(study):
    df, targets, s = study
    again = fit_methods(df, targets, profile="paper", seed=1, metric_set="all")  # the fit is deterministic
    for m in ("wa", "ties"):
        W = [f["w"] for f in s["main"]["methods"][m]["folds"]] + [f["w"] for f in again["methods"][m]["folds"]]
        hand = [sum(w[k] != 0 for w in W) / len(W) for k in range(len(COLS))]
        assert s["seeds_study"]["nonzero_freq"][m] == pytest.approx(hand)
        assert s["seeds_study"]["nonzero_freq"][m][COLS.index(GRAD)] == 1.0


def test_seeds_stable_metrics_and_ablation(study):
    _, _, s = study
    t = tables(s)
    seeds = t["seeds"].set_index("method")
    for m in ("wa", "ties"):
        vals = s["seeds_study"]["val_r"][m]
        assert vals[0] == s["main"]["methods"][m]["val_r"]
        assert seeds.loc[m, "val_r_mean"] == pytest.approx(np.mean(vals))
        assert seeds.loc[m, "val_r_std"] == pytest.approx(np.std(vals))
    # stable = one non-zero sign for every method, by hand from the seed-mean coefficients
    W = np.array([s["seeds_study"]["w_mean"][m] for m in ("wa", "ties")])
    hand = {c for k, c in enumerate(COLS) if (np.sign(W[:, k]) != 0).all() and len(set(np.sign(W[:, k]))) == 1}
    assert set(t["stable_metrics"]["metric"]) == hand and {GRAD, SUB} <= hand
    row = t["stable_metrics"].set_index("metric").loc[GRAD]
    assert row["avg"] < 0 and row["wa"] == pytest.approx(1e3 * W[0, COLS.index(GRAD)])
    # removing the category of a method's stronger planted metric costs it the most; absent ones are noted, not fitted
    abl = t["ablation"].set_index("method")
    assert abl.loc["wa", "delta_no_gradient"] < min(-0.3, abl.loc["wa", "delta_no_subspace"])
    assert abl.loc["ties", "delta_no_subspace"] < min(-0.2, abl.loc["ties", "delta_no_gradient"])
    assert abs(abl.loc["wa", "delta_no_task_vector"]) < 0.1
    assert abl.loc["average", "delta_no_gradient"] == pytest.approx(abl.loc[["wa", "ties"], "delta_no_gradient"].mean())
    assert "no_activation" not in abl.columns and any("no activation metric" in n for n in s["notes"])


def test_objectives_regularisation_and_mlp(study):
    _, _, s = study
    t = tables(s)
    for m in ("wa", "ties"):
        assert s["l1"][m]["val_r"] > 0.9
        assert s["lambda0"][m]["mean_nonzero"] >= s["l1"][m]["mean_nonzero"]  # L1 keeps fewer metrics
        assert -1 <= s["mse"][m]["val_r"] <= 1 and -1 <= s["mlp"][m]["val_r"] <= 1
    assert set(t["regularization"].columns) >= {"l1_val_r", "l1_val_r_std", "lam0_val_r", "lam0_train_r"}
    assert t["objective"]["difference"].iloc[0] == pytest.approx(s["l1"]["wa"]["val_r"] - s["mse"]["wa"]["val_r"])


def test_mse_objective_reaches_least_squares():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(60, 3))
    y = X @ np.array([0.5, -0.3, 0.2])
    w, _ = PR.fit(X, y, lam=0.0, objective="mse", seed=0)
    assert np.allclose(w, np.linalg.lstsq(X, y, rcond=None)[0], atol=0.02)


def test_study_files(study, tmp_path):
    _, _, s = study
    frames = tables(s)
    page = readme(s, frames)
    assert "Table 4 / Table 20" in page and "Table 19" in page and "Fig. 3" in page and "Table 3" in page
    files = plot_nonzero_frequency(s, tmp_path)
    assert {f.suffix for f in files} == {".png", ".svg"} and all(f.stat().st_size > 0 for f in files)


def test_the_command_writes_one_study_folder(tmp_path, capsys):
    import argparse

    from wildmerge.commands.analyze_predictor import _study

    df, targets = _fixture()
    targets = targets[targets["method"] == "wa"].assign(target_kind="normalized")
    args = argparse.Namespace(run=str(tmp_path / "run"), out=str(tmp_path / "study"), profile="paper", lam=1.0,
                              seed=0, seeds=1, metric_set="auto")
    assert _study(args, df, targets) == 0
    names = {p.name for p in (tmp_path / "study").iterdir()}
    assert {"study.json", "README.md", "ablation.csv", "objective.csv", "mlp.csv", "seeds.csv", "seed_selection.csv",
            "regularization.csv", "stable_metrics.csv", "nonzero_frequency.png", "nonzero_frequency.svg"} <= names
    assert "delta_no_gradient" in capsys.readouterr().out
