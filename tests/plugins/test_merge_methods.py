"""Our methods inside mergekit: the in-memory API, full run_merge on tiny Llama/Qwen3, the stock CLI, bad input."""

import inspect
import os
import re
import subprocess
import sys

import pytest
import torch
import yaml
from mergekit.config import MergeConfiguration
from mergekit.merge import run_merge
from mergekit.merge_methods import merge_tensors, registry
from mergekit.options import MergeOptions
from safetensors.torch import load_file

from wildmerge.errors import ConfigError
from wildmerge.plugins import methods, spectral
from wildmerge.recipes.method import list_method_recipes
from wildmerge.recipes.render import render_recipe

iso_c = methods.IsoCParams.with_defaults(spectral.iso_c)  # as the Iso-C method calls it

OURS = ["iso_c", "iso_cts", "tsv_m", "task_arithmetic_sb", "ties_sb"]
NEEDS_WEIGHT = {"task_arithmetic_sb", "ties_sb"}  # built on mergekit's GTA, where weight is required


def params_for(method, **extra):
    return {**({"weight": 1.0} if method in NEEDS_WEIGHT else {}), **extra}


def inputs(shape=(24, 16), n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(*shape, generator=g)
    return base, [base + 0.05 * torch.randn(*shape, generator=g) for _ in range(n)]


# ---------------------------------------------------------------- in-memory API


@pytest.mark.parametrize("method", OURS)
def test_zero_task_vector_gives_base_exactly(method):
    base, _ = inputs()
    out = merge_tensors([base, base.clone(), base.clone()], method, base_index=0, name="w.weight",
                        parameters=params_for(method))
    assert torch.equal(out, base)


@pytest.mark.parametrize("method", OURS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_single_expert_and_dtype_round_trip(method, dtype):
    base, experts = inputs(n=1)
    out = merge_tensors([base.to(dtype), experts[0].to(dtype)], method, base_index=0, name="w.weight",
                        parameters=params_for(method))
    assert out.dtype == dtype and out.shape == base.shape and bool(torch.isfinite(out).all())


def test_iso_c_in_mergekit_equals_base_plus_lambda_times_kernel():
    base, experts = inputs()
    weights = [1.0, 0.5, 2.0]
    out = merge_tensors([base, *experts], "iso_c", base_index=0, name="w.weight",
                        parameters={"lambda": 0.7, "weight": weights})
    deltas = [w * (e.double() - base.double()) for w, e in zip(weights, experts)]
    expected = base.double() + 0.7 * iso_c(deltas)
    assert torch.allclose(out.double(), expected, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["w.weight", "norm.weight"])  # the spectral step, and the plain-mean path
def test_unit_weights_and_lambda_skip_no_bits(dtype, name):
    """Weights and lambda of 1 (the shipped TSV-M recipe) skip their multiplications: the merged bytes equal the
    formula with every multiplication done, ``theta_0 + 1.0 * kernel(1.0 * delta_1, ...)``."""
    tsv_m = methods.TSVMParams.with_defaults(spectral.tsv_m)
    base, experts = inputs()
    base, experts = base.to(dtype), [e.to(dtype) for e in experts]
    if name == "norm.weight":
        base, experts = base[0], [e[0] for e in experts]
    out = merge_tensors([base, *experts], "tsv_m", base_index=0, name=name, parameters={"lambda": 1.0})
    deltas = [1.0 * (e.to(torch.float32) - base.to(torch.float32)) for e in experts]
    update = tsv_m(deltas) if name == "w.weight" else sum(deltas) / 3.0
    expected = (base.to(update.dtype) + 1.0 * update).to(dtype)
    assert out.dtype == dtype and torch.equal(out.view(torch.uint8), expected.view(torch.uint8))


@pytest.mark.parametrize("method", [methods.ISO_C, methods.ISO_CTS, methods.TSV_M])
def test_kernels_take_the_recipes_parameter_names(method):
    # a method hands its parameters to its kernel as they are: no adapter renames them
    kernel_args = set(inspect.signature(method.kernel).parameters) - {"deltas", "delta"}  # Iso-C's takes the sum
    recipe_names = set(method.params.fields_by_name()) - {"weight", "lambda", "spectral_vocab", "exclude"}
    assert kernel_args == recipe_names
    boost_args = set(inspect.signature(spectral.subspace_boost).parameters) - {"delta"}
    assert boost_args == {"beta", "rank_tol", "svd_precision"} <= set(methods.TaskArithmeticSBParams.fields_by_name())


@pytest.mark.parametrize("mergekit_method,ours", [("task_arithmetic", "task_arithmetic_sb"), ("ties", "ties_sb")])
def test_boosting_with_beta_one_is_exactly_mergekits_method(mergekit_method, ours):
    base, experts = inputs(n=4)
    common = {"weight": 1.0, "density": 0.3, "lambda": 0.8, "normalize": True}
    if mergekit_method == "task_arithmetic":
        common.pop("density")
    reference = merge_tensors([base, *experts], mergekit_method, base_index=0, name="w.weight", parameters=common)
    boosted = merge_tensors([base, *experts], ours, base_index=0, name="w.weight",
                            parameters={**common, "beta": 1.0})
    assert torch.equal(reference, boosted)
    lifted = merge_tensors([base, *experts], ours, base_index=0, name="w.weight", parameters={**common, "beta": 0.2})
    assert not torch.equal(reference, lifted)
    # the boosted update's tail is raised, its top singular value unchanged
    s_ref = torch.linalg.svdvals((reference - base).double())
    s_new = torch.linalg.svdvals((lifted - base).double())
    assert torch.isclose(s_ref[0], s_new[0], rtol=1e-4) and s_new[-1] > s_ref[-1]


def boosted_reference(update: torch.Tensor, beta: float) -> torch.Tensor:
    """Subspace Boosting (Skorobogat et al. 2025) in float64 from the paper: within the numerical rank, every
    singular value after the first one at which the cumulative energy reaches ``beta`` is raised to it."""
    u, s, vt = torch.linalg.svd(update.double(), full_matrices=False)
    rank = int((s > max(update.shape) * torch.finfo(torch.float32).eps * s[0]).sum())
    energy = torch.cumsum(s[:rank], 0) / s[:rank].sum()
    j = int((energy >= beta).nonzero()[0])
    lifted = s.clone()
    lifted[j + 1:rank] = s[j]
    return u @ torch.diag(lifted) @ vt


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_task_arithmetic_sb_boosts_task_arithmetics_update(normalize, dtype):
    """``theta_0 + SB(u)`` with Task Arithmetic's ``u = lambda sum_i w_i tau_i`` (divided by ``sum_i w_i`` with
    ``normalize``), against float64; and within round-off of boosting mergekit's own TA tensor (the route before)."""
    base, experts = inputs(n=4)
    base, experts = base.to(dtype), [e.to(dtype) for e in experts]
    weights = [1.0, 0.5, 2.0, 0.25]
    parameters = {"weight": weights, "lambda": 0.8, "normalize": normalize}
    out = merge_tensors([base, *experts], "task_arithmetic_sb", base_index=0, name="w.weight",
                        parameters={**parameters, "beta": 0.3})
    update = 0.8 * sum(w * (e.double() - base.double()) for w, e in zip(weights, experts))
    update = update / (sum(weights) if normalize else 1.0)
    expected = base.double() + boosted_reference(update, 0.3)
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # the result is rounded to the base's dtype
    assert out.dtype == dtype and float((out.double() - expected).abs().max() / expected.abs().max()) < tol
    ta = merge_tensors([base, *experts], "task_arithmetic", base_index=0, name="w.weight", parameters=parameters)
    before = ta.float() + methods.TaskArithmeticSBParams.with_defaults(spectral.subspace_boost)(
        ta.float() - base.float(), 0.3)
    assert float((out.float() - before).abs().max() / before.abs().max()) < tol


@pytest.mark.parametrize("method", ["iso_c", "tsv_m", "iso_cts"])
def test_vectors_and_vocabulary_matrices_follow_task_arithmetic(method):
    base, experts = inputs(shape=(16,))
    out = merge_tensors([base, *experts], method, base_index=0, name="model.norm.weight",
                        parameters={"lambda": 0.5})
    mean = torch.stack([e - base for e in experts]).mean(0)
    assert torch.allclose(out, base + 0.5 * mean, atol=1e-6)


def test_exclude_regex_overrides_spectral_rule():
    base, experts = inputs()
    out = merge_tensors([base, *experts], "iso_c", base_index=0, name="model.layers.0.mlp.up_proj.weight",
                        parameters={"exclude": r"mlp\."})
    assert torch.allclose(out, base + torch.stack([e - base for e in experts]).mean(0), atol=1e-6)


# ---------------------------------------------------------------- bad input in the kernels


def test_nan_input_names_tensor_and_model():
    base, experts = inputs()
    experts[1][3, 4] = float("nan")
    with pytest.raises(ConfigError, match=r"model\.layers\.0\.q\.weight.*NaN"):
        merge_tensors([base, *experts], "iso_c", base_index=0, name="model.layers.0.q.weight",
                      ids=["base", "a", "b", "c"])


@pytest.mark.parametrize("method", OURS)
@pytest.mark.parametrize("name", ["model.layers.0.q.weight", "model.norm.weight"])
@pytest.mark.parametrize("bad,value,weight", [(2, float("nan"), 1.0), (2, float("inf"), 1.0), (2, float("-inf"), 0.0),
                                              (2, float("nan"), 0.0), (0, float("nan"), 1.0)])
def test_a_nonfinite_input_is_named_whichever_pass_finds_it(method, name, bad, value, weight):
    """Iso-C and the plain mean check the summed task vectors, TA+SB its merged tensor, the rest every input: each
    names the tensor and the model (``bad``: 0 the base, 2 the second expert), a weight of 0 included."""
    base, experts = inputs()
    models = [base, *experts]
    if name == "model.norm.weight":
        models = [m[0].clone() for m in models]
    models[bad].view(-1)[5] = value
    parameters = params_for(method, weight=[1.0, weight, 1.0])
    model_name = ["base", "a", "b", "c"][bad]
    with pytest.raises(ConfigError, match=rf"{re.escape(name)}.* of model {model_name} contains NaN or Inf"):
        merge_tensors(models, method, base_index=0, name=name, ids=["base", "a", "b", "c"], parameters=parameters)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("weights", [[1.0, 1.0, 1.0], [0.5, 2.0, 0.3], [0.0, 1.0, 0.7]])
def test_summed_task_vectors_are_the_templates_sum_bit_for_bit(dtype, weights):
    """One buffer, the same additions in the same order as ``d_1.clone(); d_1 += d_2 ...`` over the template's
    task vectors; and Iso-C / the plain mean through mergekit equal the formula with those task vectors."""
    from wildmerge.plugins.task_vector_method import _scaled, summed_task_vectors

    base, experts = inputs(shape=(40, 24))
    base, experts = base.to(dtype), [e.to(dtype) for e in experts]
    base32 = base.to(torch.float32)
    deltas = [_scaled(w, e.to(torch.float32) - base32) for w, e in zip(weights, experts)]
    expected = deltas[0].clone()
    for d in deltas[1:]:
        expected += d
    assert torch.equal(summed_task_vectors(base32, experts, weights).view(torch.int32), expected.view(torch.int32))
    for name in ("w.weight", "norm.weight"):
        models = [base, *experts] if name == "w.weight" else [base[0], *(e[0] for e in experts)]
        ds = deltas if name == "w.weight" else [d[0] for d in deltas]
        out = merge_tensors(models, "iso_c", base_index=0, name=name, parameters={"lambda": 0.6, "weight": weights})
        update = iso_c(ds) if name == "w.weight" else sum(ds) / sum(weights)
        formula = (models[0].to(torch.float32) + 0.6 * update).to(dtype)
        assert torch.equal(out.view(torch.uint8), formula.view(torch.uint8))


def test_task_vectors_that_cancel_give_the_base_exactly():
    g = torch.Generator().manual_seed(0)
    base = torch.randint(-8, 8, (24, 16), generator=g) / 4.0  # dyadic: every difference below is exact
    step = torch.randint(-8, 8, (24, 16), generator=g) / 8.0
    for name in ("w.weight", "norm.weight"):
        models = [base, base + step, base - step] if name == "w.weight" else [base[0], base[0] + step[0],
                                                                                base[0] - step[0]]
        out = merge_tensors(models, "iso_c", base_index=0, name=name)
        assert torch.equal(out, models[0])


@pytest.mark.parametrize("method,params,match", [
    ("ties_sb", {"weight": 1.0, "beta": 1.5}, "beta"),
    ("task_arithmetic_sb", {"weight": 1.0, "beta": -0.1}, "beta"),
    ("iso_cts", {"common_space_fraction": 0.0}, "common_space_fraction"),
    ("iso_c", {"lambda": -1.0}, "lambda"),
    ("tsv_m", {"exclude": "(unclosed"}, "regex"),
])
def test_out_of_range_hyperparameters(method, params, match):
    base, experts = inputs()
    with pytest.raises(ConfigError, match=match):
        merge_tensors([base, *experts], method, base_index=0, name="w.weight", parameters=params)


def test_unknown_parameter_in_memory_api_is_an_error():
    base, experts = inputs()
    with pytest.raises(TypeError):
        merge_tensors([base, *experts], "iso_c", base_index=0, name="w.weight", parameters={"lamda": 1.0})


# ---------------------------------------------------------------- registration


def test_methods_are_registered_with_card_metadata():
    names = {m.spec.name: m for m in registry.registered_methods()}
    for name in OURS:
        assert names[name].spec.pretty_name and names[name].spec.reference_url.startswith("https://arxiv.org/")


def test_a_builtin_with_our_name_wins_and_ours_gets_an_alias(monkeypatch, caplog):
    from wildmerge.plugins.registration import register_all

    impostor = methods.SpectralMerge("iso_c", "Upstream Iso-C", "https://example.org", spectral.iso_c)
    object.__setattr__(impostor, "__wildmerge__", False)
    monkeypatch.setattr(registry, "_METHODS", {"iso_c": impostor})
    names = register_all()
    assert registry.get("iso_c") is impostor
    assert names["iso_c"] == "wildmerge_iso_c" and registry.get("wildmerge_iso_c").spec.name == "wildmerge_iso_c"
    assert "mergekit's wins" in caplog.text


# ---------------------------------------------------------------- whole models through run_merge


def run(config: dict, out, source=True):
    text = yaml.safe_dump(config)
    run_merge(MergeConfiguration.model_validate(config), str(out),
              options=MergeOptions(copy_tokenizer=False, quiet=True), config_source=text if source else None)
    return out


@pytest.mark.parametrize("recipe", [r for r in list_method_recipes() if r not in (
    "regmean", "com", "mats", "fisher", "prodistill", "localize_stitch_trained", "adamerging", "adamerging_pp")])
@pytest.mark.parametrize("family", ["tiny_family", "tiny_qwen3_family"])
def test_every_method_recipe_merges_a_real_model(recipe, family, request, tmp_path):
    from transformers import AutoModelForCausalLM

    fam = request.getfixturevalue(family)
    config = render_recipe(recipe, fam["base"], fam["experts"])
    out = run(config, tmp_path / "merged")
    model = AutoModelForCausalLM.from_pretrained(out)
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert bool(torch.isfinite(logits).all())
    spec = registry.get(config["merge_method"]).spec  # the card names and links the method that ran
    named = f"[{spec.pretty_name}]({spec.reference_url})" if spec.reference_url else spec.pretty_name  # no URL: name
    assert named in (out / "README.md").read_text()


def test_merged_matrix_equals_reference_from_checkpoints(tiny_family, tmp_path):
    out = run(render_recipe("iso_c", tiny_family["base"], tiny_family["experts"], {"lambda": 0.6}),
              tmp_path / "m")
    key = "model.layers.1.self_attn.q_proj.weight"
    base = load_file(f"{tiny_family['base']}/model.safetensors")[key].double()
    deltas = [load_file(f"{p}/model.safetensors")[key].double() - base for p in tiny_family["experts"]]
    merged = load_file(f"{out}/model.safetensors")[key].double()
    assert torch.allclose(merged, base + 0.6 * iso_c(deltas), atol=1e-6)
    # embeddings have a vocabulary axis: plain task arithmetic (mean)
    key = "model.embed_tokens.weight"
    base = load_file(f"{tiny_family['base']}/model.safetensors")[key].double()
    mean = sum(load_file(f"{p}/model.safetensors")[key].double() - base for p in tiny_family["experts"]) / 3
    assert torch.allclose(load_file(f"{out}/model.safetensors")[key].double(), base + 0.6 * mean, atol=1e-6)


@pytest.mark.parametrize("mutate,match", [
    (lambda c: c["parameters"].update(lamda=0.5), "unknown parameter 'lamda'.*did you mean 'lambda'"),
    (lambda c: c["models"][0]["parameters"].update(wieght=1.0), r"models\[0\].*unknown parameter 'wieght'"),
    (lambda c: c["parameters"].update(beta=2.0), "beta.*out of range"),
    (lambda c: c.update(merge_method="tsv_m", parameters={"topk_solver": "fast"}), "topk_solver.*'fast'.*randomized"),
    (lambda c: c.update(merge_method="ties_sbb"), "unknown merge_method 'ties_sbb'.*did you mean 'ties_sb'"),
    (lambda c: c.update(base_modle="x"), "unknown key 'base_modle'"),
])
def test_bad_recipes_fail_before_any_output(tiny_family, tmp_path, mutate, match):
    config = render_recipe("ties_sb", tiny_family["base"], tiny_family["experts"])
    mutate(config)
    with pytest.raises(ConfigError, match=match):
        run(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_mismatched_shapes_name_the_model(tiny_family, tmp_path):
    from helpers import make_tiny_model

    other = make_tiny_model(tmp_path / "wider", hidden=48)
    config = render_recipe("iso_c", tiny_family["base"], [tiny_family["experts"][0], other])
    with pytest.raises(Exception, match=r"wider\).*hidden_size: 48 vs base 32"):
        run(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the stock command line


def test_stock_mergekit_yaml_finds_our_methods_and_rejects_typos(tiny_family, tmp_path):
    config = render_recipe("tsv_m", tiny_family["base"], tiny_family["experts"])
    good, bad = tmp_path / "good.yml", tmp_path / "bad.yml"
    good.write_text(yaml.safe_dump(config))
    config["parameters"]["lamdba"] = 0.3
    bad.write_text(yaml.safe_dump(config))
    cli = os.path.join(os.path.dirname(sys.executable), "mergekit-yaml")
    ok = subprocess.run([cli, str(good), str(tmp_path / "out"), "--no-copy-tokenizer"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "TSV-Merge" in (tmp_path / "out" / "README.md").read_text()
    fail = subprocess.run([cli, str(bad), str(tmp_path / "out2"), "--no-copy-tokenizer"], capture_output=True,
                          text=True)
    assert fail.returncode != 0 and "unknown parameter 'lamdba'" in fail.stderr


def test_python_startup_stays_light():
    code = "import sys; print('torch' in sys.modules, 'mergekit' in sys.modules, '_PostImportFinder' in str(sys.meta_path))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "True"]


def test_wildmerge_merge_cli_is_atomic_and_refuses_to_clobber(tiny_family, tmp_path):
    from wildmerge.cli import main

    recipe = tmp_path / "r.yml"
    recipe.write_text(yaml.safe_dump(render_recipe("iso_c", tiny_family["base"], tiny_family["experts"][:1])))
    out = tmp_path / "out"
    assert main(["merge", str(recipe), str(out), "--no-copy-tokenizer", "--quiet"]) == 0
    assert (out / "model.safetensors").is_file()
    assert main(["merge", str(recipe), str(out)]) == 2  # exists: needs --overwrite
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_pickle_only_expert_is_refused_unless_opted_in(tiny_family, tmp_path):
    import shutil

    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_family["experts"][0], pickled)
    state = load_file(str(pickled / "model.safetensors"))
    torch.save(state, pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    config = render_recipe("iso_c", tiny_family["base"], [str(pickled)])
    with pytest.raises(Exception, match="only pickle weights"):
        run(config, tmp_path / "out")
    run_merge(MergeConfiguration.model_validate(config), str(tmp_path / "out2"),
              options=MergeOptions(copy_tokenizer=False, quiet=True, lazy_unpickle=True))
    assert (tmp_path / "out2" / "model.safetensors").is_file()


@pytest.mark.parametrize("method", ["tsv_m", "iso_cts"])
def test_topk_solver_is_a_validated_recipe_parameter(method):
    base, experts = inputs(shape=(40, 32), n=3)
    exact = merge_tensors([base, *experts], method, base_index=0, name="w.weight", parameters={})
    fast = merge_tensors([base, *experts], method, base_index=0, name="w.weight",
                         parameters={"topk_solver": "randomized"})
    deltas = [e - base for e in experts]
    ours = methods.TSV_M if method == "tsv_m" else methods.ISO_CTS
    kernel = ours.params.with_defaults(ours.kernel)
    assert torch.allclose(fast.double(), base.double() + kernel(deltas, topk_solver="randomized").double(), atol=1e-5)
    assert not torch.allclose(fast, exact)  # noise-like task vectors: the approximate top-k is not the exact one
    with pytest.raises(ValueError, match="'auto', 'exact', 'randomized' or 'randomized_batched'"):  # mergekit's own check
        merge_tensors([base, *experts], method, base_index=0, name="w.weight", parameters={"topk_solver": "fast"})
