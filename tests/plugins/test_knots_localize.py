"""KnOTS-TIES and dataless Localize-and-Stitch, each against a float64 implementation written here from its paper,
their invariants (one expert at full density is that expert; a LoRA merge stays in the adapters' span and rank;
disjoint regions stitch to their sum), and both recipes through the stock ``mergekit-yaml`` on whole checkpoints."""

import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from mergekit.merge_methods import merge_tensors
from safetensors.numpy import load_file

from wildmerge.errors import ConfigError
from wildmerge.recipes.render import render_recipe

MATRIX = "model.layers.0.self_attn.q_proj.weight"


def merge(method, base, experts, name=MATRIX, ids=None, **parameters):
    return merge_tensors([base, *experts], method, base_index=0, name=name, ids=ids, parameters=parameters).double()


def inputs(shape=(24, 16), n=3, seed=0, scale=0.05):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(*shape, generator=g)
    return base, [base + scale * torch.randn(*shape, generator=g) for _ in range(n)]


def f64(base, experts):
    b = base.double().numpy()
    return b, [e.double().numpy() - b for e in experts]


# ---------------------------------------------------------------- float64 references, written from the papers


def ref_trim(x, density):
    """TIES (Yadav et al. 2023) step 1: keep the top ``density`` share of entries by magnitude."""
    k = max(1, int(density * x.size))
    keep = np.zeros(x.size, bool)
    keep[np.argsort(-np.abs(x).ravel(), kind="stable")[:k]] = True
    return np.where(keep.reshape(x.shape), x, 0.0)


def ref_ties(xs, density):
    """TIES: trim each, elect the sign of the summed trimmed values (+ on a tie), average the agreeing entries."""
    trimmed = np.stack([ref_trim(x, density) for x in xs])
    sign = np.where(trimmed.sum(0) >= 0, 1.0, -1.0)
    agree = (np.sign(trimmed) == sign) & (trimmed != 0)
    return (trimmed * agree).sum(0) / np.maximum(agree.sum(0), 1)


def ref_knots_ties(taus, density, tol):
    """Stoica et al. 2025: [dW_1 .. dW_K] = U S [V_1^T .. V_K^T] (within the rank s > tol * s_1); TIES on the V_i;
    the merged update is U S V_merged^T."""
    n = taus[0].shape[1]
    u, s, vt = np.linalg.svd(np.concatenate(taus, axis=1), full_matrices=False)
    r = int((s > tol * s[0]).sum())
    u, s, vt = u[:, :r], s[:r], vt[:r]
    blocks = [vt[:, i * n:(i + 1) * n].T for i in range(len(taus))]
    return u @ np.diag(s) @ ref_ties(blocks, density).T


def ref_localize_stitch(taus, density):
    """He et al. 2024, dataless: gamma_t = top-k% of |tau_t|; theta_0 + sum_t (gamma_t / sum_j gamma_j) tau_t."""
    gammas = [(ref_trim(t, density) != 0).astype(float) for t in taus]
    total = sum(gammas)
    return sum(np.divide(g, total, out=np.zeros_like(g), where=total > 0) * t for g, t in zip(gammas, taus))


# ---------------------------------------------------------------- KnOTS-TIES


@pytest.mark.parametrize("shape,n,density", [((24, 16), 3, 0.1), ((16, 24), 2, 0.3), ((40, 8), 4, 0.5)])
def test_knots_ties_matches_the_reference(shape, n, density):
    base, experts = inputs(shape=shape, n=n)
    out = merge("knots_ties", base, experts, **{"lambda": 0.8, "density": density, "rank_tol": 1e-6})
    b, taus = f64(base, experts)
    np.testing.assert_allclose(out.numpy(), b + 0.8 * ref_knots_ties(taus, density, 1e-6), atol=2e-6)
    # the per-expert weights scale the task vectors before the joint SVD
    ids = ["base", *(f"e{i}" for i in range(n))]
    weighted = merge("knots_ties", base, experts, ids=ids, density=density, rank_tol=1e-6,
                     weight={f"e{i}": 0.5 * (i + 1) for i in range(n)})
    ref = ref_knots_ties([0.5 * (i + 1) * t for i, t in enumerate(taus)], density, 1e-6)
    np.testing.assert_allclose(weighted.numpy(), b + ref, atol=2e-6)


def test_one_expert_at_full_density_is_that_expert():
    base, experts = inputs(n=1)
    for name, shape_base, one in ((MATRIX, base, experts[0]), ("model.norm.weight", base[0], experts[0][0])):
        out = merge("knots_ties", shape_base, [one], name=name, density=1.0)
        np.testing.assert_allclose(out.numpy(), one.double().numpy(), atol=2e-6)
    zero = merge("knots_ties", base, [base.clone(), base.clone()])
    assert torch.equal(zero, base.double())  # nothing to merge: the base exactly


def test_lora_experts_stay_in_the_adapters_span_and_rank():
    """Folded LoRA experts W_0 + B_i A_i: the merged update has rank <= sum_i r_i and its columns lie in the span
    of the B_i (the joint SVD's U spans exactly the concatenated updates' columns)."""
    g = torch.Generator().manual_seed(4)
    m, n, ranks = 32, 24, (2, 3, 1)
    base = 0.1 * torch.randn(m, n, generator=g, dtype=torch.float64)
    bs = [torch.randn(m, r, generator=g, dtype=torch.float64) for r in ranks]
    experts = [(base + 0.2 * b @ torch.randn(r, n, generator=g, dtype=torch.float64)).float()
               for b, r in zip(bs, ranks)]
    out = merge("knots_ties", base.float(), experts, density=0.3)
    update = out.numpy() - base.float().double().numpy()
    s = np.linalg.svd(update, compute_uv=False)
    assert int((s > 1e-5 * s[0]).sum()) <= sum(ranks)
    span, _ = np.linalg.qr(torch.cat(bs, 1).numpy())
    outside = update - span @ (span.T @ update)
    assert np.linalg.norm(outside) < 1e-5 * np.linalg.norm(update)
    b, taus = f64(base.float(), experts)  # the default rank rule cuts the float32 rounding of W_0 + B A
    np.testing.assert_allclose(update, ref_knots_ties(taus, 0.3, 1e-5), atol=2e-6)


def test_vectors_and_vocabulary_matrices_get_ties_on_the_task_vectors():
    base, experts = inputs(shape=(24, 16), n=3)
    b, taus = f64(base, experts)
    vec = merge("knots_ties", base[0], [e[0] for e in experts], name="model.norm.weight", **{"lambda": 0.5})
    np.testing.assert_allclose(vec.numpy(), b[0] + 0.5 * ref_ties([t[0] for t in taus], 0.1), atol=1e-6)
    excluded = merge("knots_ties", base, experts, exclude="q_proj", density=0.4)
    np.testing.assert_allclose(excluded.numpy(), b + ref_ties(taus, 0.4), atol=1e-6)


def test_knots_ties_refuses_out_of_range_parameters():
    base, experts = inputs()
    with pytest.raises(ConfigError, match=r"knots_ties: parameter 'density' = 0.0 is out of range; it must be in "
                                          r"\(0.0, 1.0\]"):
        merge("knots_ties", base, experts, density=0.0)


# ---------------------------------------------------------------- Localize-and-Stitch (dataless)


@pytest.mark.parametrize("density", [0.05, 0.1, 0.5])
def test_localize_stitch_matches_the_reference(density):
    base, experts = inputs(n=4)
    out = merge("localize_stitch", base, experts, **{"lambda": 0.9, "density": density})
    b, taus = f64(base, experts)
    np.testing.assert_allclose(out.numpy(), b + 0.9 * ref_localize_stitch(taus, density), atol=1e-6)
    vec = merge("localize_stitch", base[0], [e[0] for e in experts], name="model.norm.weight", density=density)
    np.testing.assert_allclose(vec.numpy(), b[0] + ref_localize_stitch([t[0] for t in taus], density), atol=1e-6)


def test_disjoint_regions_stitch_to_their_sum_and_overlaps_average():
    base = torch.zeros(4, 4)
    a, c = torch.zeros(4, 4), torch.zeros(4, 4)
    a[0, :] = torch.tensor([5.0, -4.0, 3.0, 2.0])
    c[1, :] = torch.tensor([-6.0, 7.0, 1.0, 8.0])
    both = merge("localize_stitch", base, [a, c], density=0.25)  # top 4 of 16: each task's own row
    np.testing.assert_array_equal(both.numpy(), (a + c).double().numpy())
    same = merge("localize_stitch", base, [a, 3 * a], density=0.25)  # one region claimed twice: the mean
    np.testing.assert_array_equal(same.numpy(), (2 * a).double().numpy())
    one = merge("localize_stitch", base, [a + c], density=1.0)  # one task, everything localized: that task
    np.testing.assert_array_equal(one.numpy(), (a + c).double().numpy())


# ---------------------------------------------------------------- whole checkpoints, stock mergekit-yaml


def test_stock_mergekit_yaml_runs_both_recipes_as_the_references(tiny_family, tmp_path):
    configs = []
    for name in ("knots_ties", "localize_stitch"):
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(render_recipe(name, tiny_family["base"], tiny_family["experts"])))
        configs.append((str(path), str(tmp_path / name)))
    code = ("from mergekit.scripts.run_yaml import main\n"
            f"for cfg, out in {configs!r}:\n"
            "    main([cfg, out, '--no-copy-tokenizer', '--quiet'], standalone_mode=False)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    base = {k: v.astype(np.float64) for k, v in load_file(f"{tiny_family['base']}/model.safetensors").items()}
    taus = [{k: load_file(f"{p}/model.safetensors")[k].astype(np.float64) - base[k] for k in base}
            for p in tiny_family["experts"]]
    knots = load_file(f"{tmp_path}/knots_ties/model.safetensors")
    stitched = load_file(f"{tmp_path}/localize_stitch/model.safetensors")
    matrices = 0
    for k in base:
        ts = [t[k] for t in taus]
        spectral = base[k].ndim == 2 and "embed_tokens" not in k and "lm_head" not in k
        want = ref_knots_ties(ts, 0.1, max(ts[0].shape[0], 3 * ts[0].shape[1]) * np.finfo(np.float32).eps) \
            if spectral else ref_ties(ts, 0.1)
        matrices += spectral
        np.testing.assert_allclose(knots[k], base[k] + want, atol=1e-5, err_msg=k)
        np.testing.assert_allclose(stitched[k], base[k] + ref_localize_stitch(ts, 0.1), atol=1e-6, err_msg=k)
    assert matrices >= 14  # 7 projections in each of 2 blocks went through the joint SVD
