"""The reality-check paper's comparison baselines (Consensus TA, LiNeS on TA and on Consensus, STAR, TSV lossless) and
NormAvg / MetaGPT per block and per model, each against a float64 implementation written here from its paper; the
recipes through mergekit's in-process merge, the stock ``mergekit-yaml`` and ``wildmerge sample --methods``."""

import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from mergekit.config import MergeConfiguration
from mergekit.merge import run_merge
from mergekit.merge_methods import merge_tensors
from mergekit.options import MergeOptions
from safetensors.numpy import load_file

from wildmerge.errors import ConfigError
from wildmerge.recipes.render import render_recipe

NEW_RECIPES = ["consensus_ta", "lines_ta", "lines_consensus", "star", "tsv_lossless", "dare_ties", "breadcrumbs",
               "breadcrumbs_ties", "norm_avg_block", "norm_avg_model", "metagpt_block", "metagpt_model"]


def inputs(shape=(24, 16), n=3, seed=0, scales=None):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(*shape, generator=g, dtype=torch.float64)
    scales = scales or [0.05] * n
    experts = [base + s * torch.randn(*shape, generator=g, dtype=torch.float64) for s in scales]
    return base.float(), [e.float() for e in experts]


def f64(base, experts):
    b = base.double().numpy()
    return b, [e.double().numpy() - b for e in experts]


def merge(method, base, experts, name="model.layers.0.mlp.down_proj.weight", ids=None, **parameters):
    return merge_tensors([base, *experts], method, base_index=0, name=name, ids=ids, parameters=parameters).double()


# ---------------------------------------------------------------- float64 references, written from the papers


def ref_consensus(taus, tall_lambda=0.4, k=2):
    """Wang et al. 2024, Eq. (TALL mask) + consensus: m_t = 1{|tau_t| > lambda_t |tau_MTL - tau_t|}, keep >= k."""
    mtl = sum(taus)
    votes = sum((np.abs(t) > tall_lambda * np.abs(mtl - t)).astype(int) for t in taus)
    return (votes >= k) * mtl


def ref_star(tau, eta):
    """Lee et al. 2025: keep the fewest r with sum_{i<=r} s_i >= eta sum s; rescale them to the nuclear norm."""
    u, s, vt = np.linalg.svd(tau, full_matrices=False)
    r = int(np.argmax(np.cumsum(s) >= eta * s.sum())) + 1
    return u[:, :r] @ np.diag(s[:r] * s.sum() / s[:r].sum()) @ vt[:r]


def polar(m):
    p, _, qt = np.linalg.svd(m, full_matrices=False)
    return p @ qt


def ref_tsv_lossless(taus):
    """Gargiulo et al. 2025, TSV-Merge with every singular triplet of every task (no 1/T truncation)."""
    svds = [np.linalg.svd(t, full_matrices=False) for t in taus]
    u = np.concatenate([s[0] for s in svds], axis=1)
    sig = np.concatenate([s[1] for s in svds])
    v = np.concatenate([s[2] for s in svds], axis=0)  # rows: V^T blocks
    return polar(u) @ np.diag(sig) @ polar(v.T).T


def ref_lines_scale(layer, n_layers, alpha, beta):
    """Wang et al. 2025: lambda(l) = alpha + beta (l - 1) / (L - 1) for blocks l = 1..L (here 0-based)."""
    return alpha + beta * layer / (n_layers - 1)


# ---------------------------------------------------------------- kernels against the references, in memory


@pytest.mark.parametrize("tall_lambda,k", [(0.4, 2), (0.2, 1), (0.6, 3)])
def test_consensus_ta_matches_reference(tall_lambda, k):
    base, experts = inputs(scales=[0.05, 0.2, 0.01])
    out = merge("consensus_ta", base, experts, **{"lambda": 0.6, "tall_lambda": tall_lambda, "k": k})
    b, taus = f64(base, experts)
    np.testing.assert_allclose(out.numpy(), b + 0.6 * ref_consensus(taus, tall_lambda, k), atol=1e-6)
    # k = 0 keeps every entry: Task Arithmetic on the sum
    ta = merge("consensus_ta", base, experts, **{"lambda": 0.3, "k": 0})
    np.testing.assert_allclose(ta.numpy(), b + 0.3 * sum(taus), atol=1e-6)


@pytest.mark.parametrize("eta", [0.6, 0.9, 0.95])
def test_star_matches_reference_and_keeps_the_nuclear_norm(eta):
    base, experts = inputs()
    out = merge("star", base, experts, **{"lambda": 1.2, "eta": eta})
    b, taus = f64(base, experts)
    ref = b + 1.2 * sum(ref_star(t, eta) for t in taus) / len(taus)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-5)
    one = merge("star", base, experts[:1], **{"eta": eta}).numpy() - b  # one task: STAR(tau) itself
    assert np.linalg.norm(one, "nuc") == pytest.approx(np.linalg.norm(taus[0], "nuc"), rel=1e-5)
    assert np.linalg.matrix_rank(one, tol=1e-6) <= np.linalg.matrix_rank(taus[0])
    full = merge("star", base, experts[:1], eta=1.0).numpy() - b  # eta = 1 keeps everything
    np.testing.assert_allclose(full, taus[0], atol=1e-5)
    # vectors follow plain averaging
    vec = merge("star", base[0], [e[0] for e in experts], name="model.norm.weight", **{"lambda": 0.5}).numpy()
    np.testing.assert_allclose(vec, b[0] + 0.5 * sum(t[0] for t in taus) / 3, atol=1e-6)


@pytest.mark.parametrize("shape,n", [((24, 16), 3), ((16, 24), 2), ((40, 8), 4)])
def test_tsv_lossless_matches_reference(shape, n):
    base, experts = inputs(shape=shape, n=n)
    out = merge("tsv_lossless", base, experts, **{"lambda": 0.7})
    b, taus = f64(base, experts)
    np.testing.assert_allclose(out.numpy(), b + 0.7 * ref_tsv_lossless(taus), atol=1e-5)
    single = merge("tsv_lossless", base, experts[:1]).numpy() - b  # one task: lossless is the identity
    np.testing.assert_allclose(single, taus[0], atol=1e-5)


def test_lines_ta_scales_each_block_by_depth():
    base, experts = inputs()
    b, taus = f64(base, experts)
    for layer in range(4):
        out = merge("lines_ta", base, experts, name=f"model.layers.{layer}.self_attn.q_proj.weight",
                    **{"lambda": 0.5, "num_layers": 4})
        scale = ref_lines_scale(layer, 4, 1 / 3, 0.5)  # alpha = 1/T for TA
        np.testing.assert_allclose(out.numpy(), b + scale * sum(taus), atol=1e-6)
    outside = merge("lines_ta", base, experts, name="lm_head.weight", **{"lambda": 0.5, "alpha": 0.2})
    np.testing.assert_allclose(outside.numpy(), b + 0.2 * sum(taus), atol=1e-6)
    with pytest.raises(ConfigError, match="lines_ta: the number of blocks .* needs the checkpoints on disk"):
        merge("lines_ta", base, experts)
    with pytest.raises(ConfigError, match="is in block 5, but num_layers is 4"):
        merge("lines_ta", base, experts, name="model.layers.5.mlp.up_proj.weight", num_layers=4)


def test_lines_consensus_with_alpha_given_is_lines_on_the_consensus_vector():
    base, experts = inputs(scales=[0.05, 0.1, 0.02])
    b, taus = f64(base, experts)
    out = merge("lines_consensus", base, experts, name="model.layers.2.mlp.up_proj.weight",
                **{"lambda": 0.3, "alpha": 0.25, "num_layers": 3})
    np.testing.assert_allclose(out.numpy(), b + (0.25 + 0.3) * ref_consensus(taus), atol=1e-6)


def test_lines_consensus_in_memory_takes_alpha_from_the_state_dicts_merged_together():
    """mergekit's ``merge_state_dicts`` (no folders): alpha unset is the L1 rule over every tensor of the call."""
    from mergekit.merge_methods.api import merge_state_dicts

    names = ["model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight", "lm_head.weight"]
    pairs = [inputs(seed=i, scales=[0.05, 0.1, 0.02]) for i in range(len(names))]
    dicts = [{n: (p[0] if m == 0 else p[1][m - 1]) for n, p in zip(names, pairs)} for m in range(4)]
    out = merge_state_dicts(dict(zip(["base", "a", "b", "c"], dicts)), "lines_consensus", base="base",
                            parameters={"lambda": 0.4, "num_layers": 2})
    refs = [f64(*p) for p in pairs]
    whole = sum(np.abs(sum(taus)).sum() for _, taus in refs)
    kept = sum(np.abs(ref_consensus(taus)).sum() for _, taus in refs)
    alpha = whole / kept / 3
    for name, (b, taus) in zip(names, refs):
        layer = 0 if ".0." in name else 1 if ".1." in name else None
        scale = alpha if layer is None else ref_lines_scale(layer, 2, alpha, 0.4)
        np.testing.assert_allclose(out[name].double().numpy(), b + scale * ref_consensus(taus), atol=1e-5)
    assert alpha > 1 / 3  # the consensus mask drops mass, so alpha grows over TA's 1/T


# ---------------------------------------------------------------- whole checkpoints: block / model norms, LiNeS alpha


def run(config, out):
    run_merge(MergeConfiguration.model_validate(config), str(out), options=MergeOptions(copy_tokenizer=False, quiet=True))
    return load_file(f"{out}/model.safetensors")


def checkpoints(family):
    base = {k: v.astype(np.float64) for k, v in load_file(f"{family['base']}/model.safetensors").items()}
    taus = [{k: load_file(f"{p}/model.safetensors")[k].astype(np.float64) - base[k] for k in base}
            for p in family["experts"]]
    return base, taus


def block(name):
    import re

    m = re.search(r"\blayers\.(\d+)\.", name)
    return f"layers.{m.group(1)}" if m else name


def norms_by(taus, key):
    """{group: [||tau_t^group||_2]} with every parameter of a group flattened together (the paper's App. G)."""
    out = {}
    for t, tau in enumerate(taus):
        for name, x in tau.items():
            out.setdefault(key(name), [0.0] * len(taus))[t] += float((x ** 2).sum())
    return {g: np.sqrt(v) for g, v in out.items()}


@pytest.mark.parametrize("scope", ["block", "model"])
def test_norm_avg_and_metagpt_per_block_and_model_match_the_papers_equations(tiny_family, tmp_path, scope):
    base, taus = checkpoints(tiny_family)
    norms = norms_by(taus, block if scope == "block" else (lambda name: "model"))
    avg = run(render_recipe(f"norm_avg_{scope}", tiny_family["base"], tiny_family["experts"]), tmp_path / "avg")
    meta = run(render_recipe(f"metagpt_{scope}", tiny_family["base"], tiny_family["experts"]), tmp_path / "meta")
    for name in base:
        n = norms[block(name) if scope == "block" else "model"]
        # NormAvg: tau'_t = tau_t * min_j ||tau_j|| / ||tau_t||, averaged; MetaGPT Eq. 4: lambda_t = ||tau_t|| / sum
        ref_avg = base[name] + sum(t[name] * n.min() / nt for t, nt in zip(taus, n)) / len(taus)
        ref_meta = base[name] + sum(t[name] * nt / n.sum() for t, nt in zip(taus, n))
        np.testing.assert_allclose(avg[name], ref_avg, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(meta[name], ref_meta, atol=1e-6, err_msg=name)
    # the block variant really differs from the per-tensor one inside a block
    tensor = run(render_recipe("norm_avg", tiny_family["base"], tiny_family["experts"]), tmp_path / "tensor")
    key = "model.layers.1.mlp.down_proj.weight"
    assert not np.allclose(tensor[key], avg[key], atol=1e-7)


def test_block_scope_in_memory_needs_the_folders(tiny_family):
    base, experts = inputs()
    with pytest.raises(ConfigError, match="norm_avg: scope 'block' needs the checkpoints on disk"):
        merge("norm_avg", base, experts, scope="block")
    key = "model.layers.0.mlp.down_proj.weight"
    b, e = (torch.from_numpy(load_file(f"{p}/model.safetensors")[key]) for p in
            (tiny_family["base"], tiny_family["experts"][0]))
    rest = [torch.from_numpy(load_file(f"{p}/model.safetensors")[key]) for p in tiny_family["experts"][1:]]
    ids = [tiny_family["base"], *tiny_family["experts"]]  # inputs named by their folders: the pass finds them
    out = merge("metagpt", b, [e, *rest], name=key, ids=ids, scope="model")
    base_all, taus = checkpoints(tiny_family)
    n = norms_by(taus, lambda name: "model")["model"]
    ref = base_all[key] + sum(t[key] * nt / n.sum() for t, nt in zip(taus, n))
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-6)


def test_lines_on_whole_models_take_depth_from_config_and_alpha_from_the_l1_rule(tiny_family, tmp_path):
    base, taus = checkpoints(tiny_family)
    n_layers, T = 2, len(taus)  # tiny_family: num_hidden_layers 2
    merged = {name: ref_consensus([t[name] for t in taus]) for name in base}
    alpha = sum(np.abs(sum(t[k] for t in taus)).sum() for k in base) / (T * sum(np.abs(m).sum() for m in merged.values()))
    assert alpha > 1 / T  # the consensus mask drops entries: the authors' rule raises alpha to make up for it
    out = run(render_recipe("lines_consensus", tiny_family["base"], tiny_family["experts"],
                            {"lambda": 0.4}), tmp_path / "lc")
    ta = run(render_recipe("lines_ta", tiny_family["base"], tiny_family["experts"], {"lambda": 0.4}),
             tmp_path / "lt")
    for name in base:
        layer = [int(p) for p in name.split(".") if p.isdigit()]
        scale = ref_lines_scale(layer[0], n_layers, alpha, 0.4) if ".layers." in name else alpha
        np.testing.assert_allclose(out[name], base[name] + scale * merged[name], atol=1e-6, err_msg=name)
        scale = ref_lines_scale(layer[0], n_layers, 1 / T, 0.4) if ".layers." in name else 1 / T
        np.testing.assert_allclose(ta[name], base[name] + scale * sum(t[name] for t in taus), atol=1e-6,
                                   err_msg=name)


# ---------------------------------------------------------------- the stock mergekit-yaml and `wildmerge sample`


def test_stock_mergekit_yaml_runs_every_new_recipe(tiny_family, tmp_path):
    """One fresh interpreter runs mergekit-yaml's own entry point on each recipe (the .pth hook registers ours)."""
    configs = []
    for name in NEW_RECIPES:
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(render_recipe(name, tiny_family["base"], tiny_family["experts"])))
        configs.append((str(path), str(tmp_path / "out" / name)))
    code = ("import sys; from mergekit.scripts.run_yaml import main\n"
            f"for cfg, out in {configs!r}:\n"
            "    main([cfg, out, '--no-copy-tokenizer', '--quiet'], standalone_mode=False)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    for name in NEW_RECIPES:
        assert (tmp_path / "out" / name / "model.safetensors").is_file(), name
    # the CLI's output is the in-process merge's
    star = load_file(f"{tmp_path}/out/star/model.safetensors")
    again = run(render_recipe("star", tiny_family["base"], tiny_family["experts"]), tmp_path / "again")
    for k in star:
        np.testing.assert_array_equal(star[k], again[k])


def test_sample_methods_merges_the_new_recipes(tiny_family, tmp_path):
    from helpers import write_pool
    from wildmerge.cli import main

    pool = write_pool(tmp_path, tiny_family)
    methods = "dare_ties,breadcrumbs,consensus_ta,lines_ta,star,tsv_lossless,metagpt_block"
    assert main(["sample", "--base", pool, "--out", str(tmp_path / "run"), "--sizes", "2", "--k", "1",
                 "--methods", methods, "--no-evaluate"]) == 0
    models = sorted(p.name for p in (tmp_path / "run" / "models").iterdir())
    for m in methods.split(","):
        assert sum(name.startswith(f"{m}__") for name in models) == 2, (m, models)  # one pair + the full pool
