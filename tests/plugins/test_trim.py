"""TIES's trim in linear time (``plugins/trim.py``) against an independent float64 selection written from the TIES
paper (Yadav et al. 2023: keep each task vector's top ``density`` share by magnitude), against mergekit's own
``magnitude`` where the cut has no tie, and only inside wildmerge's merges."""

import mergekit.sparsify as sparsify
import numpy as np
import pytest
import torch
from mergekit.sparsify import RescaleNorm

from wildmerge.plugins import trim
from wildmerge.plugins.entrypoint import wildmerge_checks


def reference_mask(x: torch.Tensor, density: float) -> np.ndarray:
    """Top ``max(1, int(density * n))`` magnitudes in float64; ties at the cut: lowest flat index first."""
    flat = np.abs(x.detach().to(torch.float64).numpy().reshape(-1))
    k = max(1, int(density * flat.size))
    order = np.lexsort((np.arange(flat.size), -flat))  # by magnitude descending, then by index
    mask = np.zeros(flat.size, dtype=bool)
    mask[order[:k]] = True
    return mask.reshape(x.shape)


def quantised(shape, seed: int, levels: int = 40) -> torch.Tensor:
    """Values on a coarse grid: many entries tie in magnitude, as differences of nearby float32 weights do."""
    g = torch.Generator().manual_seed(seed)
    return torch.round(torch.randn(shape, generator=g) * levels) / (levels * 1000)


@pytest.mark.parametrize("density", [0.001, 0.1, 0.37, 0.5, 0.99])
@pytest.mark.parametrize("seed", [0, 1])
def test_mask_is_the_stable_top_share_with_ties(density, seed):
    x = quantised((96, 130), seed)
    kept = trim.magnitude(x, density) != 0
    expected = reference_mask(x, density) & (x.numpy() != 0)  # a kept zero stays zero
    assert np.array_equal(kept.numpy(), expected)
    mask = trim.top_share_mask(x.abs().reshape(-1), max(1, int(density * x.numel())))
    assert int(mask.sum()) == max(1, int(density * x.numel()))
    assert np.array_equal(mask.numpy(), reference_mask(x, density).reshape(-1))


@pytest.mark.parametrize("norm", [None, RescaleNorm.l1, RescaleNorm.l2, RescaleNorm.linf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_mergekit_bit_for_bit_without_a_tie_at_the_cut(norm, dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randperm(20000, generator=g).float() - 10000.5).reshape(100, 200).to(dtype)  # distinct magnitudes
    if dtype == torch.bfloat16:  # bfloat16 collapses neighbours: keep a cut without a tie
        x = torch.linspace(-1, 1, 251)[torch.randperm(251, generator=g)].to(dtype)
        assert x.abs().unique().numel() * 2 > x.numel()
    for density in (0.05, 0.3, 0.8):
        ours = trim.magnitude(x, density, rescale_norm=norm)
        theirs = sparsify.magnitude(x, density, rescale_norm=norm)
        w = x.abs().reshape(-1).float()
        k = max(1, int(density * x.numel()))
        cut = torch.sort(w, descending=True).values[k - 1]
        if int((w == cut).sum()) == 1:
            assert ours.dtype == theirs.dtype
            assert torch.equal(ours, theirs) and torch.equal(ours.signbit(), theirs.signbit())  # -0.0 too


def test_edges_are_mergekits():
    x = quantised((7, 9), 5)
    assert torch.equal(trim.magnitude(x, 1.0), x)
    assert torch.equal(trim.magnitude(x, 0.0), torch.zeros_like(x))
    assert trim.magnitude(torch.zeros(0), 0.5).numel() == 0
    one = trim.magnitude(x, 1e-9)  # at least one entry kept
    assert int((one != 0).sum()) == 1 and one.abs().max() == x.abs().max()


def test_only_inside_wildmerges_merges():
    original = sparsify.magnitude
    assert original is not trim.magnitude
    with wildmerge_checks():
        assert sparsify.magnitude is trim.magnitude
        with trim.linear_time_trim():  # re-entrant
            assert sparsify.magnitude is trim.magnitude
        assert sparsify.magnitude is trim.magnitude
    assert sparsify.magnitude is original  # the stock mergekit-yaml sorts as before
    with pytest.raises(RuntimeError):
        with trim.linear_time_trim():
            raise RuntimeError("a failed merge")
    assert sparsify.magnitude is original


def test_knots_ties_and_dataless_localize_stitch_use_it_inside_the_block():
    """KnOTS-TIES and the dataless Localize-and-Stitch trim through mergekit's ``magnitude`` looked up per call: the
    linear-time trim inside wildmerge's merges, mergekit's sort outside. Checked against float64 from the reference
    mask (ties at the cut: lowest index first): KnOTS' TIES mean (agreeing entries averaged) and Localize-and-Stitch
    (kept entries summed, divided by how many tasks keep each, at least 1)."""
    from wildmerge.plugins.knots import ties_mean
    from wildmerge.plugins.localize_stitch import localize_stitch

    taus = [quantised((40, 50), 30 + i) for i in range(3)]
    kept = [t.to(torch.float64).numpy() * reference_mask(t, 0.2) for t in taus]
    sign = np.where(np.sum(kept, 0) >= 0, 1.0, -1.0)  # the elected sign; a sum of exactly 0 elects + (mergekit)
    agree = (np.sign(kept) == sign) & (np.stack(kept) != 0)
    ties_expected = (np.stack(kept) * agree).sum(0) / np.maximum(agree.sum(0), 1)
    stitch_expected = np.sum(kept, 0) / np.maximum((np.stack(kept) != 0).sum(0), 1)
    with trim.linear_time_trim():
        ties_inside = ties_mean(torch.stack(taus), 0.2).numpy()
        stitch_inside = localize_stitch(taus, 0.2).numpy()
    np.testing.assert_allclose(ties_inside, ties_expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(stitch_inside, stitch_expected, rtol=0, atol=1e-9)
    called = []
    original = sparsify.magnitude
    try:  # outside the block, mergekit's own function is the one called
        sparsify.magnitude = lambda *a, **k: called.append(1) or original(*a, **k)
        ties_mean(torch.stack(taus), 0.2)
        localize_stitch(taus, 0.2)
    finally:
        sparsify.magnitude = original
    assert len(called) == 6


def test_ties_merge_through_mergekit_uses_it():
    """mergekit's TIES (its ``sparsify`` dispatch) picks the linear-time trim inside the block: the merged tensor
    equals TIES computed in float64 from the reference mask."""
    from mergekit.merge_methods.base import TensorEntry, TensorGroup, TensorMetadata
    import mergekit.merge_methods as merge_methods

    base = quantised((40, 50), 10)
    experts = [base + quantised((40, 50), 11 + i) for i in range(3)]
    group = TensorGroup(entries=(TensorEntry(id="base", tensor=base, is_base=True),
                                 *[TensorEntry(id=f"e{i}", tensor=e) for i, e in enumerate(experts)]),
                        metadata=TensorMetadata(name="w", vocabulary_axis=None))
    method = merge_methods.get("ties")
    params = {"weight": {f"e{i}": 1.0 for i in range(3)}, "density": {f"e{i}": 0.2 for i in range(3)},
              "normalize": False, "lambda": 1.0, "int8_mask": False, "rescale": False}
    with wildmerge_checks():
        merged = method([group], parameters=params, dtype=torch.float32, out_dtype=torch.float32)[0]
    # TIES in float64: trim, elect the sign of the sum, sum the agreeing entries (normalize off)
    taus = [(e - base).to(torch.float64).numpy() for e in experts]
    trimmed = np.stack([t * reference_mask(torch.from_numpy(t), 0.2) for t in taus])
    sign = np.sign(trimmed.sum(0))
    agree = (np.sign(trimmed) == sign) & (trimmed != 0)
    expected = base.to(torch.float64).numpy() + (trimmed * agree).sum(0)
    np.testing.assert_allclose(merged.numpy(), expected, rtol=0, atol=1e-6)


def test_wildmerge_merge_runs_ties_through_the_trim_and_closes_its_inputs(tiny_family, tmp_path, monkeypatch):
    """``wildmerge merge`` of mergekit's TIES selects with the linear-time trim, and afterwards no input shard is
    left open in this process (mergekit's loader cache would otherwise keep each input's pages mapped)."""
    import yaml
    from mergekit.io.tasks import LoaderCache

    from wildmerge.cli import main

    calls = []
    real = trim.top_share_mask
    monkeypatch.setattr(trim, "top_share_mask", lambda *a: calls.append(1) or real(*a))
    recipe = {"merge_method": "ties", "base_model": tiny_family["base"], "dtype": "float32",
              "parameters": {"normalize": True},
              "models": [{"model": e, "parameters": {"weight": 1.0, "density": 0.5}} for e in tiny_family["experts"]]}
    (tmp_path / "r.yml").write_text(yaml.safe_dump(recipe))
    assert main(["merge", str(tmp_path / "r.yml"), str(tmp_path / "out")]) == 0
    assert calls  # every tensor of every expert trimmed here
    assert sparsify.magnitude is not trim.magnitude
    assert LoaderCache().loaders and all(loader.current_shard is None for loader in LoaderCache().loaders.values())
