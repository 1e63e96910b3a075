"""The reality-check paper's figures of the task alignment score, drawn from what ``wildmerge tune`` already wrote.

- Fig. 11 (App. E): a one-hyperparameter grid's mean TAS under every distance, each min-max scaled to [0, 1]
  (the paper: l1, l2 and cosine give almost the same curves); from the sweep's records.
- Fig. 10 (App. E): the same grid tuned several times (``--samples 32``: one batch of the sweep's 32 samples,
  against more batches), l2 curves min-max scaled on one axis; from each grid folder's ``candidates/*.json``.
- Fig. 9 (App. D): AdaMMS*'s neighbour distances and stability score against the swept value; from ``adamms.json``.
- Fig. 14 (App. H): AdaMerging+TAS's loss and each expert's mean coefficient over the optimiser steps; from
  ``coefficients.json``.

Every figure's numbers are written beside it as a CSV (``write_*`` functions), so they can be read back and checked.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional

from wildmerge.analysis.plotting import pyplot, save_figure, style
from wildmerge.analysis.tas.score import DISTANCES
from wildmerge.atomic import write_text
from wildmerge.errors import ConfigError


def minmax(values: List[float]) -> List[float]:
    """Scaled to [0, 1] (a constant curve is all 0: it has no shape to compare)."""
    low, high = min(values), max(values)
    return [(v - low) / (high - low) if high > low else 0.0 for v in values]


def one_key(records: List[dict]) -> Optional[str]:
    """The grid's one varied hyperparameter, or None (a curve needs one axis)."""
    keys = sorted({k for r in records for k in r["hparams"]
                   if len({repr(q["hparams"].get(k)) for q in records}) > 1})
    return keys[0] if len(keys) == 1 else None


def distance_table(records: List[dict]):
    """Fig. 11's points: one row per value of the swept key and distance, mean TAS raw and min-max scaled."""
    import pandas as pd

    key = one_key(records)
    if key is None or len(records) < 2:
        return None
    ordered = sorted(records, key=lambda r: r["hparams"][key])
    xs = [r["hparams"][key] for r in ordered]
    rows = []
    for distance in DISTANCES:
        raw = [r["tas"][distance] for r in ordered]
        rows += [{key: x, "distance": distance, "tas": t, "scaled": s} for x, t, s in zip(xs, raw, minmax(raw))]
    return pd.DataFrame(rows)


def _x_axis(ax, values, key: str) -> None:
    """The swept value; a log scale where the grid spans 20x or more (the TA sweep's lambda = 10 point)."""
    low, high = min(values), max(values)
    if low > 0 and high / low >= 20:
        ax.set_xscale("log")
    ax.set_xlabel(f"{key} (swept hyperparameter)")


def _lines(table, key: str, series: str, ylabel: str, title: str, stem: Path) -> Dict[str, Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, name in enumerate(dict.fromkeys(table[series])):
        g = table[table[series] == name]
        ax.plot(g[key], g["scaled"], ms=4, lw=1.6, label=str(name), **style(i))
    _x_axis(ax, table[key].tolist(), key)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return save_figure(fig, stem)


def write_distances(records: List[dict], out_dir, name: str) -> List[Path]:
    """``tas_distances.csv`` and its figure in ``out_dir`` (nothing for a grid over several hyperparameters)."""
    table = distance_table(records)
    if table is None:
        return []
    out = Path(out_dir)
    key = one_key(records)
    return [write_text(out / "tas_distances.csv", table.to_csv(index=False, float_format="%.10g")),
            *_lines(table, key, "distance", "mean TAS, min-max scaled", f"{name}: TAS under each distance "
                    f"(the reality-check paper, Fig. 11)", out / "tas_distances").values()]


def read_records(grid_dir) -> List[dict]:
    """The sweep's records of one tuned grid (``GRID/candidates/*.json``), with a message when there are none."""
    folder = Path(grid_dir) / "candidates"
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    if not records:
        raise ConfigError(f"{grid_dir} holds no TAS sweep (no candidates/*.json): give a grid folder written by "
                          f"`wildmerge tune`, e.g. runs/tune-demo/ta_lambda")
    return records


def batches_table(runs: Dict[str, List[dict]], distance: str = "l2"):
    """Fig. 10's points: per tuned grid (label) and value of the swept key, mean TAS raw and min-max scaled."""
    import pandas as pd

    keys = {label: one_key(records) for label, records in runs.items()}
    if len(set(keys.values())) != 1 or None in keys.values():
        swept = ", ".join(f"{label}: {k or 'several'}" for label, k in keys.items())
        raise ConfigError(f"the grids must sweep the same one hyperparameter to be drawn together; they sweep {swept}")
    key = next(iter(keys.values()))
    rows = []
    for label, records in runs.items():
        ordered = sorted(records, key=lambda r: r["hparams"][key])
        raw = [r["tas"][distance] for r in ordered]
        rows += [{"grid": label, key: r["hparams"][key], "tas": t, "scaled": s}
                 for r, t, s in zip(ordered, raw, minmax(raw))]
    return pd.DataFrame(rows)


def write_batches(grid_dirs: List[str], out_dir, distance: str = "l2") -> List[Path]:
    """``tas_batches.csv`` and its figure: the grids' curves together (label: the grid folder as given)."""
    runs = {str(d): read_records(d) for d in grid_dirs}
    table = batches_table(runs, distance)
    out = Path(out_dir)
    key = [c for c in table.columns if c not in ("grid", "tas", "scaled")][0]
    return [write_text(out / "tas_batches.csv", table.to_csv(index=False, float_format="%.10g")),
            *_lines(table.rename(columns={"grid": "series"}), key, "series", f"mean TAS ({distance}), min-max scaled",
                    "TAS of the same grid from different data (the reality-check paper, Fig. 10: 1 against 50 "
                    "batches)", out / "tas_batches").values()]


def adamms_table(records: List[dict]):
    """Fig. 9's points: per swept value, the distances to both neighbours and the AdaMMS* score (empty at the ends)."""
    import pandas as pd

    key = one_key(records)
    return pd.DataFrame([{key: r["hparams"][key], "d_prev": r["d_prev"], "d_next": r["d_next"], "score": r["score"]}
                         for r in records])


def write_adamms(records: List[dict], out_dir, name: str) -> List[Path]:
    """``adamms.csv`` and its figure: the score (selected: its lowest interior point) and the neighbour distances."""
    table = adamms_table(records)
    key = table.columns[0]
    out = Path(out_dir)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(table[key], table["d_next"], label="d(a_i, a_i+1)", ms=4, **style(1))
    ax.plot(table[key], table["score"], label="AdaMMS* score (mean of both neighbours)", ms=5, lw=2, **style(0))
    scored = table.dropna(subset=["score"])
    best = scored.loc[scored["score"].idxmin()]
    ax.axvline(best[key], color="grey", ls=":", lw=1, label=f"selected {key} = {best[key]:g}")
    _x_axis(ax, table[key].tolist(), key)
    ax.set_ylabel("feature distance (l2, mean over tokens)")
    ax.set_title(f"{name}: AdaMMS* (the reality-check paper, Fig. 9)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return [write_text(out / "adamms.csv", table.to_csv(index=False, float_format="%.10g")),
            *save_figure(fig, out / "adamms").values()]


def adamerging_table(record: dict):
    """Fig. 14's points: per optimiser step, the loss and each expert's mean coefficient over the groups."""
    import pandas as pd

    steps = range(1, len(record["losses"]) + 1)
    table = pd.DataFrame({"step": list(steps), "loss": record["losses"]})
    for i, expert in enumerate(record["experts"]):
        table[expert] = [row[i] for row in record.get("trajectory") or []] or float("nan")
    return table


def write_adamerging(out_dir) -> List[Path]:
    """``adamerging.csv`` and its figure from ``out_dir/coefficients.json`` (``wildmerge tune --adamerging``)."""
    out = Path(out_dir)
    record = json.loads((out / "coefficients.json").read_text())
    table = adamerging_table(record)
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(table["step"], table["loss"], color="black", lw=1.2)
    left.set_xlabel("optimiser step")
    left.set_ylabel(f"loss ({record['settings']['loss']})")
    for i, expert in enumerate(record["experts"]):
        right.plot(table["step"], table[expert], lw=1.4, label=expert, **{**style(i), "marker": None})
    right.set_xlabel("optimiser step")
    right.set_ylabel("coefficient λ_t (mean over blocks)")
    right.legend(fontsize=7, ncol=2, loc="best")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(f"AdaMerging ({record['settings']['loss']}): the reality-check paper, Fig. 14")
    fig.tight_layout()
    return [write_text(out / "adamerging.csv", table.to_csv(index=False, float_format="%.10g")),
            *save_figure(fig, out / "adamerging").values()]
