"""Task-vector geometry against a direct float64 computation over whole state dicts."""

import csv

import numpy as np
import pytest
from safetensors.numpy import load_file

from wildmerge.analysis.pool.geometry import task_vector_geometry, write_geometry


def flat(path, keys=None):
    sd = load_file(f"{path}/model.safetensors")
    keys = sorted(sd) if keys is None else keys
    return np.concatenate([sd[k].astype(np.float64).ravel() for k in keys])


def test_cosines_and_layer_signs_match_reference(tiny_family, tmp_path):
    base, experts = tiny_family["base"], dict(zip("abc", tiny_family["experts"]))
    result = task_vector_geometry(base, experts, progress=False)
    taus = [flat(p) - flat(base) for p in experts.values()]
    for i in range(3):
        for j in range(3):
            ref = taus[i] @ taus[j] / (np.linalg.norm(taus[i]) * np.linalg.norm(taus[j]))
            assert result["cosine"][i][j] == pytest.approx(ref, abs=1e-9)
    assert result["norms"][1] == pytest.approx(np.linalg.norm(taus[1]), rel=1e-9)
    keys = sorted(load_file(f"{base}/model.safetensors"))
    signs = np.zeros((3, 3), dtype=int)
    for layer in range(2):
        layer_keys = [k for k in keys if f"layers.{layer}." in k]
        lt = [flat(p, layer_keys) - flat(base, layer_keys) for p in experts.values()]
        signs += np.array([[int(a @ b > 0) for b in lt] for a in lt])
    assert result["layers"] == 2 and np.array_equal(result["positive_layers"], signs)

    written = write_geometry(result, tmp_path)
    assert {p.name for p in written} == {"cosine.csv", "layer_signs.csv", "geometry.json", "cosine.png", "cosine.svg",
                                         "layer_signs.png", "layer_signs.svg"}
    svg = (tmp_path / "layer_signs.svg").read_text()
    assert "layers with positive cosine (of 2)" in svg and "expert" in svg  # colour-bar and axis labels
    rows = list(csv.DictReader(open(tmp_path / "layer_signs.csv")))
    assert len(rows) == 3 and all(int(r["positive_layers"]) + int(r["negative_layers"]) <= 2 for r in rows)
    assert all(float(r["zero_tolerance"]) == 1e-6 for r in rows)


def test_layers_within_the_tolerance_count_in_neither_sign(tiny_family):
    from wildmerge.analysis.pool.geometry import _layer_signs

    near_zero = np.array([[1.0, 5e-7], [5e-7, 1.0]])
    negative = np.array([[1.0, -0.3], [-0.3, 1.0]])
    tiny_negative = np.array([[1.0, -2e-7], [-2e-7, 1.0]])
    signs = _layer_signs({0: near_zero, 1: negative, 2: tiny_negative}, tolerance=1e-6)
    assert signs["positive_layers"] == [[3, 0], [0, 3]] and signs["negative_layers"] == [[0, 1], [1, 0]]
    strict = _layer_signs({0: near_zero, 1: negative, 2: tiny_negative}, tolerance=0.0)
    assert strict["positive_layers"][0][1] == 1 and strict["negative_layers"][0][1] == 2
    # through the real computation: a tolerance above every off-diagonal cosine leaves only the diagonal
    result = task_vector_geometry(tiny_family["base"], dict(zip("ab", tiny_family["experts"])), progress=False,
                                  tolerance=0.999)
    assert result["positive_layers"] == [[2, 0], [0, 2]] and result["negative_layers"] == [[0, 0], [0, 0]]


def test_an_expert_equal_to_the_base_has_zero_cosine(tiny_family):
    result = task_vector_geometry(tiny_family["base"], {"same": tiny_family["base"], "x": tiny_family["experts"][0]},
                                  progress=False)
    assert result["norms"][0] == 0.0 and result["cosine"][0][1] == 0.0
