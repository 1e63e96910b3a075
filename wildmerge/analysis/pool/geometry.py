"""Task-vector geometry of a pool (Hitit et al., arXiv 2511.21437, Figs. 19-26): how aligned are the experts' updates?

- whole-model cosine similarity of every pair of task vectors ``tau_i = theta_i - theta_0``;
- per pair, the number of decoder layers whose task vectors point the same way (cosine > 0) and the opposite way
  (cosine < 0); a layer whose |cosine| is within ``ZERO_COSINE_TOLERANCE`` (an orthogonal pair, or an expert that
  left the layer unchanged) counts in neither.

Streams one tensor of every model at a time from the safetensors files, accumulating float64 dot products, so
memory stays at one tensor per model whatever the model size.
"""

import re
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import numpy as np

_LAYER = re.compile(r"\blayers\.(\d+)\.")
ZERO_COSINE_TOLERANCE = 1e-6  # float64 accumulation of float32/bf16 differences: far below any real alignment


def _open_checkpoint(folder: str, stack) -> Dict[str, object]:
    """tensor name -> open safetensors handle, for every shard of a checkpoint folder."""
    from safetensors import safe_open

    from wildmerge.checkpoints import tensor_index

    index = tensor_index(folder)
    handles = {shard: stack.enter_context(safe_open(str(shard), framework="pt")) for shard in set(index.values())}
    return {name: handles[shard] for name, shard in index.items()}


def stream_task_vectors(base: str, experts: List[str], desc: str, progress: bool = True) -> Iterator[Tuple[str, object]]:
    """``(tensor name, float64 [n_experts, numel] task vectors)`` for every floating tensor of the base, one
    tensor of every checkpoint in memory at a time; a tensor an expert lacks counts as unchanged (zeros). An expert
    with added tokens is read on the base's tokens (``checkpoints.on_base_tokens``)."""
    import contextlib

    import torch
    from tqdm.auto import tqdm

    from wildmerge.checkpoints import on_base_tokens, resized_rows

    resized = resized_rows(base, {e: e for e in experts})
    aligned = [resized.get(e, (None, None)) for e in experts]

    def read(index, tensor, i):
        return on_base_tokens(index[tensor].get_tensor(tensor), *aligned[i])

    with contextlib.ExitStack() as stack:
        base_index = _open_checkpoint(base, stack)
        indexes = [_open_checkpoint(e, stack) for e in experts]
        for tensor in tqdm(sorted(base_index), desc=desc, unit="tensor", disable=not progress):
            theta0 = base_index[tensor].get_tensor(tensor)
            if not theta0.is_floating_point():
                continue
            theta0 = theta0.to(torch.float64).flatten()
            yield tensor, torch.stack([read(index, tensor, i).to(torch.float64).flatten() - theta0
                                       if tensor in index else torch.zeros_like(theta0)
                                       for i, index in enumerate(indexes)])


def task_vector_geometry(base: str, experts: Dict[str, str], progress: bool = True,
                         tolerance: float = ZERO_COSINE_TOLERANCE) -> dict:
    """Pairwise whole-model cosines and per-layer sign counts of the experts' task vectors."""
    names = list(experts)
    n = len(names)
    gram = np.zeros((n, n))
    layer_gram: Dict[int, np.ndarray] = defaultdict(lambda: np.zeros((n, n)))
    for tensor, taus in stream_task_vectors(base, [experts[e] for e in names], "task-vector geometry", progress):
        g = (taus @ taus.T).numpy()
        gram += g
        match = _LAYER.search(tensor)
        if match:
            layer_gram[int(match.group(1))] += g
    return {"experts": names, "cosine": _cosine(gram).tolist(), "norms": np.sqrt(np.diag(gram)).tolist(),
            **_layer_signs({k: _cosine(v) for k, v in sorted(layer_gram.items())}, tolerance)}


def _cosine(gram: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.diag(gram))
    denom = np.outer(norms, norms)
    return np.divide(gram, denom, out=np.zeros_like(gram), where=denom > 0)


def _layer_signs(layer_cos: Dict[int, np.ndarray], tolerance: float) -> dict:
    if not layer_cos:
        return {"layers": 0, "zero_tolerance": tolerance, "positive_layers": [], "negative_layers": []}
    stack = np.stack(list(layer_cos.values()))
    return {"layers": len(layer_cos), "zero_tolerance": tolerance,
            "positive_layers": (stack > tolerance).sum(0).tolist(),
            "negative_layers": (stack < -tolerance).sum(0).tolist(),
            "layer_cosine": stack.tolist()}


def write_geometry(result: dict, out_dir) -> List[Path]:
    """cosine.csv, layer_signs.csv, geometry.json, a cosine heatmap and the per-layer sign-count heatmaps (PNG and
    SVG) in ``out_dir``."""
    import pandas as pd

    from wildmerge.atomic import write_json, write_text

    out = Path(out_dir)
    names = result["experts"]
    written = [write_text(out / "cosine.csv", pd.DataFrame(result["cosine"], index=names, columns=names)
                          .to_csv(float_format="%.6f"))]
    rows = [{"expert_a": a, "expert_b": b, "positive_layers": result["positive_layers"][i][j],
             "negative_layers": result["negative_layers"][i][j], "layers": result["layers"],
             "zero_tolerance": result.get("zero_tolerance", 0.0)}
            for i, a in enumerate(names) for j, b in enumerate(names) if i < j and result["layers"]]
    written.append(write_text(out / "layer_signs.csv", pd.DataFrame(rows).to_csv(index=False)))
    written.append(write_json(out / "geometry.json", result))
    written += _plot_cosine(np.array(result["cosine"]), names, out)
    if result["layers"]:
        written += _plot_signs(result, names, out)
    return written


def _plot_cosine(cos: np.ndarray, names: List[str], out: Path) -> List[Path]:
    from wildmerge.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    size = max(4.0, 0.55 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size * 0.85))
    limit = max(float(np.abs(cos - np.eye(len(names))).max()), 1e-6)
    im = ax.imshow(cos, cmap="cividis", vmin=-limit, vmax=limit)  # lightness rises with cosine: readable in grey
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right")
    ax.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            if i != j and len(names) <= 16:
                ax.text(j, i, f"{cos[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if cos[i, j] > 0 else "white")
    ax.set_xlabel("expert")
    ax.set_ylabel("expert")
    fig.colorbar(im, ax=ax, label="cosine similarity of task vectors")
    ax.set_title("Pairwise cosine similarity of task vectors (whole model)")
    return list(save_figure(fig, out / "cosine").values())


def _plot_signs(result: dict, names: List[str], out: Path) -> List[Path]:
    """Figs. 23-26: per pair, how many layers point the same way (left) and the opposite way (right)."""
    from wildmerge.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    size = max(4.0, 0.5 * len(names) + 2)
    fig, axes = plt.subplots(1, 2, figsize=(2 * size, size * 0.85))
    for ax, key, what in zip(axes, ("positive_layers", "negative_layers"), ("positive", "negative")):
        counts = np.array(result[key], dtype=float)
        im = ax.imshow(counts, cmap="Greys", vmin=0, vmax=result["layers"])
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right")
        ax.set_yticks(range(len(names)), names)
        ax.set_xlabel("expert")
        ax.set_ylabel("expert")
        if len(names) <= 16:
            for i in range(len(names)):
                for j in range(len(names)):
                    ax.text(j, i, f"{int(counts[i, j])}", ha="center", va="center", fontsize=7,
                            color="white" if counts[i, j] > result["layers"] / 2 else "black")
        bar = fig.colorbar(im, ax=ax, label=f"layers with {what} cosine (of {result['layers']})")
        bar.locator = plt.MaxNLocator(integer=True)
        bar.update_ticks()
        ax.set_title(f"{what} cosine (|cos| > {result['zero_tolerance']:g})")
    fig.suptitle("Per-layer sign of task-vector cosine similarity")
    fig.tight_layout()
    return list(save_figure(fig, out / "layer_signs").values())
