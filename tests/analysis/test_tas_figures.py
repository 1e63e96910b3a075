"""The task alignment score's figures (the reality-check paper, Figs. 9, 10, 11 and 14), drawn by real ``wildmerge
tune`` runs on a tiny LM pool: each figure's CSV must equal the numbers tune wrote (``tas.csv``, ``adamms.json``,
``coefficients.json``), rescaled here in float64 from the paper's definitions (min-max over the curve)."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import lm_family  # noqa: F401  (fixture)
from helpers import run_tune as _tune, text_pool as _pool
from wildmerge.cli import main
from wildmerge.errors import ConfigError

LAMBDAS = [0.2, 0.6, 1.0]


def _grid(tmp_path, grid):
    path = tmp_path / "grid.yml"
    path.write_text(yaml.safe_dump({"sweep": {"method": "ta", "grid": grid}}))
    return path


def _minmax64(values):
    x = np.asarray(values, dtype=np.float64)
    return (x - x.min()) / (x.max() - x.min())


def _mean_tas(grid_dir):
    """{distance: mean TAS per lambda, in grid order} read back from tune's own tas.csv."""
    t = pd.read_csv(grid_dir / "tas.csv")
    t = t[t["expert"] == "mean"].sort_values("lambda")
    return t


@pytest.fixture(scope="module")
def tuned(lm_family, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("tas_figures")
    pool, grid = _pool(lm_family, root), _grid(root, {"lambda": LAMBDAS})
    for samples in (4, 8):  # the same grid from less and more data (Fig. 10)
        assert _tune("--pool", pool, "--grid", grid, "--out", root / f"s{samples}", "--samples", samples) == 0
    return root, pool, grid


def test_distance_curves_are_tas_csv_min_max_scaled(tuned):
    root, _, _ = tuned
    grid_dir = root / "s4" / "sweep"
    curves = pd.read_csv(grid_dir / "tas_distances.csv")
    means = _mean_tas(grid_dir)
    assert sorted(curves["distance"].unique()) == ["cosine", "kl", "l1", "l2"]
    for distance, g in curves.groupby("distance"):
        assert g["lambda"].tolist() == LAMBDAS
        assert g["tas"].tolist() == pytest.approx(means[distance].tolist(), rel=1e-6)
        assert g["scaled"].tolist() == pytest.approx(_minmax64(means[distance]).tolist(), abs=1e-6)
        assert g["scaled"].min() == 0.0 and g["scaled"].max() == pytest.approx(1.0)
    svg = (grid_dir / "tas_distances.svg").read_text()
    assert "Fig. 11" in svg and (grid_dir / "tas_distances.png").stat().st_size > 0


def test_batches_figure_draws_two_tune_runs_on_one_axis(tuned, capsys):
    root, _, _ = tuned
    grids = [root / "s4" / "sweep", root / "s8" / "sweep"]
    out = root / "batches"
    assert main(["analyze", "tas", *map(str, grids), "--out", str(out)]) == 0
    table = pd.read_csv(out / "tas_batches.csv")
    for grid_dir in grids:
        g = table[table["grid"] == str(grid_dir)]
        means = _mean_tas(grid_dir)
        assert g["lambda"].tolist() == LAMBDAS
        assert g["tas"].tolist() == pytest.approx(means["l2"].tolist(), rel=1e-6)
        assert g["scaled"].tolist() == pytest.approx(_minmax64(means["l2"]).tolist(), abs=1e-6)
    assert "Fig. 10" in (out / "tas_batches.svg").read_text()
    assert main(["analyze", "tas", str(grids[0])]) == 2
    assert "at least two grid folders" in capsys.readouterr().err
    assert main(["analyze", "tas", str(grids[0]), str(root)]) == 2
    assert "holds no TAS sweep" in capsys.readouterr().err


def test_batches_refuse_grids_over_different_hyperparameters():
    from wildmerge.analysis.tas.figures import batches_table

    a = [{"hparams": {"lambda": v}, "tas": {"l2": v}} for v in (0.1, 0.5)]
    b = [{"hparams": {"density": v}, "tas": {"l2": v}} for v in (0.1, 0.5)]
    with pytest.raises(ConfigError, match="sweep the same one hyperparameter"):
        batches_table({"a": a, "b": b})


def test_adamms_curve_is_its_records(tuned):
    root, pool, grid = tuned
    out = root / "adamms"
    assert _tune("--pool", pool, "--grid", grid, "--out", out, "--samples", 4, "--select", "adamms") == 0
    records = json.loads((out / "sweep" / "adamms.json").read_text())
    curve = pd.read_csv(out / "sweep" / "adamms.csv")
    assert curve["lambda"].tolist() == LAMBDAS
    assert curve["d_next"].iloc[:-1].tolist() == pytest.approx([r["d_next"] for r in records[:-1]])
    assert curve["d_prev"].iloc[1:].tolist() == pytest.approx(curve["d_next"].iloc[:-1].tolist())  # shared edges
    assert curve["score"].isna().tolist() == [True, False, True]  # the ends have one neighbour
    assert curve["score"].iloc[1] == pytest.approx((records[1]["d_prev"] + records[1]["d_next"]) / 2)
    assert "Fig. 9" in (out / "sweep" / "adamms.svg").read_text()


def test_adamerging_curves_are_its_losses_and_coefficient_trajectories(lm_family, tuned):  # noqa: F811
    root, pool, _ = tuned
    out = root / "ada"
    assert _tune("--pool", pool, "--adamerging", "tas", "--iterations", 3, "--samples", 4, "--batch-size", 2,
                 "--lr", 0.05, "--out", out) == 0
    record = json.loads((out / "coefficients.json").read_text())
    curves = pd.read_csv(out / "adamerging.csv")
    assert curves["step"].tolist() == [1, 2, 3]
    assert curves["loss"].tolist() == pytest.approx(record["losses"])
    lam = np.asarray(record["coefficients"], dtype=np.float64)  # [experts, blocks + 1] after the last step
    last = curves.iloc[-1]
    for t, expert in enumerate(record["experts"]):
        assert last[expert] == pytest.approx(lam[t].mean(), abs=1e-6)  # the trajectory ends at the learned values
        assert ((curves[expert] >= 0) & (curves[expert] <= 1)).all()  # clamped after every step
    assert not np.allclose(curves[record["experts"]].to_numpy(), 1 / len(record["experts"]))  # it moved
    assert "Fig. 14" in (out / "adamerging.svg").read_text()
