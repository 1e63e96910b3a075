"""Task-vector norm imbalance of a pool (the reality-check paper, "Model merging beyond image classification", Figs. 5, 12-13).

Per expert and per layer: the norm of its task vector ``||tau_t^l||``, its cosine with the sum of all task vectors
(whom the merge follows), and per layer the max/min norm ratio. A layer is a transformer block (``layers.<i>.``);
every other tensor (embeddings, final norm, lm_head) is its own group. One tensor of every model is read at a time
and float64 Gram matrices are accumulated, so memory stays at one tensor per model.
"""

import re
from pathlib import Path
from typing import Dict, List

import numpy as np

from wildmerge.analysis.pool.geometry import stream_task_vectors

_BLOCK = re.compile(r"\blayers\.(\d+)\.")
IMBALANCE_FLAG = 3.0  # our threshold: above it, sign election and norm weighting follow the largest expert


def layer_of(tensor: str) -> str:
    match = _BLOCK.search(tensor)
    return f"layer_{int(match.group(1)):03d}" if match else tensor


def layer_grams(base: str, experts: Dict[str, str], progress: bool = True) -> Dict[str, np.ndarray]:
    """{layer: Gram matrix of the experts' task vectors on that layer}, plus ``model`` for the whole model."""
    grams: Dict[str, np.ndarray] = {}
    for tensor, taus in stream_task_vectors(base, list(experts.values()), "task-vector norms", progress):
        g = (taus @ taus.T).numpy()
        for key in (layer_of(tensor), "model"):
            grams[key] = grams.get(key, 0) + g
    return dict(sorted(grams.items(), key=lambda kv: (kv[0] == "model", not kv[0].startswith("layer_"), kv[0])))


def imbalance_rows(grams: Dict[str, np.ndarray], names: List[str]) -> List[dict]:
    """One row per layer and expert: norm, cosine with the sum of task vectors, the layer's max/min norm ratio."""
    rows = []
    for layer, g in grams.items():
        norms = np.sqrt(np.clip(np.diag(g), 0, None))
        sum_norm = float(np.sqrt(max(g.sum(), 0.0)))
        smallest = norms.min()
        ratio = float(norms.max() / smallest) if smallest > 0 else float("inf")
        for i, name in enumerate(names):
            denom = norms[i] * sum_norm
            rows.append({"layer": layer, "expert": name, "norm": float(norms[i]),
                         "cos_with_sum": float(g[i].sum() / denom) if denom > 0 else 0.0,
                         "max_min_ratio": ratio})
    return rows


def summary(rows: List[dict]) -> dict:
    whole = [r for r in rows if r["layer"] == "model"]
    ratio = whole[0]["max_min_ratio"] if whole else float("nan")
    out = {"norms": {r["expert"]: r["norm"] for r in whole},
           "cos_with_sum": {r["expert"]: r["cos_with_sum"] for r in whole},
           "max_min_ratio": ratio, "flagged": bool(ratio > IMBALANCE_FLAG)}
    if out["flagged"]:
        largest = max(out["norms"], key=out["norms"].get)
        out["note"] = (f"task-vector norms differ by {ratio:.1f}x (> {IMBALANCE_FLAG:g}): TIES (sign election) and "
                       f"MetaGPT (norm weighting) are expected to follow {largest}; compare with norm_avg")
    return out


def write_imbalance(rows: List[dict], names: List[str], out_dir) -> List[Path]:
    """imbalance.csv, imbalance.json and a per-layer norm plot with the whole-model cosines (PNG and SVG)."""
    import pandas as pd

    from wildmerge.atomic import write_json, write_text

    out = Path(out_dir)
    written = [write_text(out / "imbalance.csv", pd.DataFrame(rows).to_csv(index=False, float_format="%.8g")),
               write_json(out / "imbalance.json", summary(rows))]
    return written + list(_plot(rows, names, out).values())


def _plot(rows: List[dict], names: List[str], out: Path) -> dict:
    from wildmerge.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    layers = sorted({r["layer"] for r in rows if r["layer"].startswith("layer_")})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    for i, name in enumerate(names):
        ys = [next(r["norm"] for r in rows if r["layer"] == layer and r["expert"] == name) for layer in layers]
        left.plot(range(len(layers)), ys, marker="o", label=name, color=plt.get_cmap("tab20")(i % 20))
    left.set_xticks(range(len(layers)), [layer.split("_")[1].lstrip("0") or "0" for layer in layers])
    left.set_xlabel("transformer block")
    left.set_ylabel("task-vector norm ||tau_t^l||")
    left.set_title("per-layer task-vector norms")
    left.legend(fontsize="small", ncol=2)
    whole = {r["expert"]: r for r in rows if r["layer"] == "model"}
    right.barh(names, [whole[n]["cos_with_sum"] for n in names])
    right.set_xlabel("cosine with the sum of task vectors")
    right.set_title(f"max/min norm ratio {whole[names[0]]['max_min_ratio']:.2f}")
    fig.tight_layout()
    return save_figure(fig, out / "imbalance")
