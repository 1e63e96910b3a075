"""Each method's parameters are declared once (a pydantic model) and everything else agrees with it: mergekit's
ParameterSpec tuples, the recipe check and its messages, the recipe files, the kernels (no defaults of their own)
and the README's method table."""

import importlib
import inspect
import re
from pathlib import Path

import pytest
import torch
from mergekit.config import MergeConfiguration
from mergekit.merge_methods.base import MISSING
from mergekit.merge_methods.generalized_task_arithmetic import ConsensusMethod, GeneralizedTaskArithmeticMerge
from mergekit.sparsify import SparsificationMethod

from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.plugins import methods, spectral
from wildmerge.plugins.layerwise.regmean import GramAccumulator, closed_form_merge
from wildmerge.plugins.registration import METHOD_MODULES, our_methods
from wildmerge.plugins.layerwise.driver import recipe_params
from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS, ChainOfMergesParams, RegMeanParams
from wildmerge.plugins.method_params import interval
from wildmerge.recipes.method import list_method_recipes, load_method_recipe
from wildmerge.plugins.validation import validate_merge_config

README = Path(__file__).resolve().parents[2] / "README.md"
LAYERWISE_DOC = README.parent / "docs" / "layerwise.md"
OURS = {m.spec.name: m for m in our_methods()}


def _spec_rows(spec):
    return [(p.name, p.value_type, p.scope, p.default) for p in spec.parameters]


@pytest.mark.parametrize("ours,consensus,sparsify,normalize", [
    ("task_arithmetic_sb", None, None, False),
    ("ties_sb", ConsensusMethod.sum, SparsificationMethod.magnitude, True),
])
def test_boosted_methods_declare_exactly_mergekits_ta_ties_parameters_first(ours, consensus, sparsify, normalize):
    """Our declaration of mergekit's TA/TIES parameters must match mergekit's own (names, types, scope, defaults)."""
    mergekit_own = GeneralizedTaskArithmeticMerge(
        consensus_method=consensus, sparsification_method=sparsify, default_normalize=normalize,
        default_rescale=False, method_name="x", method_pretty_name="x", method_reference_url="x").spec
    rows = _spec_rows(OURS[ours].spec)
    assert rows[:len(mergekit_own.parameters)] == _spec_rows(mergekit_own)
    assert [r[0] for r in rows[len(mergekit_own.parameters):]] == [
        "beta", "svd_precision", "rank_tol", "spectral_vocab", "exclude"]


@pytest.mark.parametrize("name", sorted(OURS))
def test_mergekit_spec_is_derived_from_the_model(name):
    method = OURS[name]
    spec = {p.name: p for p in method.spec.parameters}
    fields = method.params.fields_by_name()
    assert list(spec) == list(fields)
    for key, field in fields.items():
        assert spec[key].default == (MISSING if field.is_required() else field.default)
        assert spec[key].description == field.description


@pytest.mark.parametrize("method,key,value,message", [
    ("iso_cts", "common_space_fraction", 0.0,
     "iso_cts: parameter 'common_space_fraction' = 0.0 is out of range; it must be in (0.0, 1.0]"),
    ("ties_sb", "beta", 1.5, "ties_sb: parameter 'beta' = 1.5 is out of range; it must be in [0.0, 1.0]"),
    ("iso_c", "lambda", -1.0, "iso_c: parameter 'lambda' = -1.0 is out of range; it must be in [0.0, inf)"),
    ("iso_c", "lambda", float("nan"), "iso_c: parameter 'lambda' = nan is out of range; it must be in [0.0, inf)"),
    ("tsv_m", "rank_tol", 1.0, "tsv_m: parameter 'rank_tol' = 1.0 is out of range; it must be in [0.0, 1.0)"),
    ("ties_sb", "density", 0.0, "ties_sb: parameter 'density' = 0.0 is out of range; it must be in (0.0, 1.0]"),
    ("iso_c", "svd_precision", "float16", "iso_c: parameter 'svd_precision' = 'float16' is invalid: "
                                          "Input should be 'float32' or 'float64'"),
    ("tsv_m", "exclude", "(unclosed", "tsv_m: parameter 'exclude' = '(unclosed' is invalid: not a valid regex"),
    ("tsv_m", "topk_solver", "lanczos", "tsv_m: parameter 'topk_solver' = 'lanczos' is invalid: Input should be "
                                        "'auto', 'exact', 'randomized' or 'randomized_batched'"),
])
def test_recipe_values_are_checked_against_the_declared_ranges(method, key, value, message):
    config = MergeConfiguration.model_validate({
        "merge_method": method, "base_model": "base", "parameters": {key: value},
        "models": [{"model": "a", "parameters": {"weight": 1.0}}]})
    with pytest.raises(ConfigError) as err:
        validate_merge_config(config)
    assert str(err.value).startswith(message)


def test_mergekit_builtin_density_and_gradients_are_checked_too():
    config = MergeConfiguration.model_validate({
        "merge_method": "ties", "base_model": "base",
        "models": [{"model": "a", "parameters": {"weight": 1.0, "density": [0.5, 1.2]}}]})
    with pytest.raises(ConfigError) as err:
        validate_merge_config(config)
    assert str(err.value) == "ties: parameter 'density' = 1.2 is out of range; it must be in (0.0, 1.0]"


def test_negative_weight_and_lambda_keep_mergekits_ta_meaning():
    config = MergeConfiguration.model_validate({
        "merge_method": "task_arithmetic_sb", "base_model": "base", "parameters": {"lambda": -0.5},
        "models": [{"model": "a", "parameters": {"weight": -1.0}}]})
    validate_merge_config(config)  # a negative task vector is how TA subtracts a task: not an error


def test_layerwise_methods_have_their_own_defaults():
    assert recipe_params("chain_of_merges", None) == ChainOfMergesParams()
    assert recipe_params("regmean", None) == RegMeanParams()
    assert ChainOfMergesParams().model_dump() == {
        "norm": "token", "sim": True, "ridge": "delta", "lam_rel": 0.01, "diagnostics": True,
        "omega_reference": "merged"}
    assert RegMeanParams().model_dump() == {
        "norm": "none", "sim": False, "ridge": "delta", "lam_rel": 0.01, "diagnostics": True}
    assert recipe_params("regmean", {"sim": True}).norm == "none"


@pytest.mark.parametrize("raw,message", [
    ({"lam_rell": 0.1}, "unknown parameter 'lam_rell' for regmean (did you mean 'lam_rel'?); valid parameters: norm,"),
    ({"lam_rel": -0.1}, "regmean: parameter 'lam_rel' = -0.1 is out of range; it must be in [0.0, inf)"),
    ({"norm": "layer"}, "regmean: parameter 'norm' = 'layer' is invalid: Input should be 'token', 'feature' or 'none'"),
    ({"lam_rel": [0.1, 0.2]}, "parameter 'lam_rel' of regmean must be a single value"),
])
def test_layerwise_parameter_errors(raw, message):
    with pytest.raises(ConfigError) as err:
        recipe_params("regmean", raw)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("recipe", ["com", "regmean", "mats", "fisher", "prodistill",
                                    "localize_stitch_trained", "adamerging", "adamerging_pp"])
def test_layerwise_recipe_files_state_exactly_the_declared_defaults(recipe):
    data = load_method_recipe(recipe).recipe
    declared = LAYERWISE_METHODS[data["merge_method"]].params
    later = ADDED_LATER.get(data["merge_method"], set())
    assert data["parameters"] == declared().model_dump(exclude=later)


# Parameters declared after their recipe shipped, left out of it so that the recipe hash of every earlier merge (and
# so its run folder's resume) stays as it was; their defaults are what the method did before.
ADDED_LATER = {"chain_of_merges": {"omega_reference"}}


# The values a shipped recipe chooses (its paper's selection, or the variant it exists for); every other parameter it
# states for one of our methods is the default the method declares.
CHOSEN = {
    "consensus_ta": {"lambda"}, "lines_consensus": {"lambda"}, "lines_ta": {"lambda"}, "tsv_lossless": {"lambda"},
    "ta_sb": {"normalize"}, "ties_sb": {"lambda", "density"},  # the in-the-wild study's TA / TIES settings
    "metagpt_block": {"scope"}, "metagpt_model": {"scope"}, "norm_avg_block": {"scope"}, "norm_avg_model": {"scope"},
}
DECLARED = {**{name: m.params for name, m in OURS.items()}, **{n: m.params for n, m in LAYERWISE_METHODS.items()}}


@pytest.mark.parametrize("recipe", list_method_recipes())
def test_shipped_recipes_state_the_declared_defaults_except_their_choices(recipe):
    method = load_method_recipe(recipe)
    declared = DECLARED.get(method.recipe["merge_method"])
    if declared is None:
        return  # one of mergekit's own methods: mergekit declares its defaults
    defaults = declared.defaults()
    stated = {**method.recipe.get("parameters", {}), **method.model_parameters}
    departs = {k for k, v in stated.items() if k in defaults and defaults[k] != v}
    assert departs == CHOSEN.get(recipe, set()), f"{recipe}: states {departs} unlike the declared defaults"
    assert set(stated) <= set(declared.fields_by_name())


def _data_first(kernel) -> list:
    """The keywords of a kernel after its data argument(s) (task vectors, their norms)."""
    return [p for p in inspect.signature(kernel).parameters.values()
            if p.name not in ("deltas", "delta", "norms", "d", "self", "weights", "grams", "omegas", "base",
                              "precision", "device")]


KERNELS = [getattr(m, field) for m in OURS.values() for field in ("kernel", "merged") if hasattr(m, field)]


@pytest.mark.parametrize("kernel", [*KERNELS, spectral.subspace_boost, closed_form_merge, GramAccumulator.__init__],
                         ids=lambda k: k.__qualname__)
def test_kernels_take_every_parameter_explicitly(kernel):
    """A kernel's defaults would be a second declaration that could disagree with the parameter model's."""
    with_default = [p.name for p in _data_first(kernel) if p.default is not inspect.Parameter.empty]
    assert with_default == [], f"{kernel.__qualname__}: defaults for {with_default}"


def test_the_autoload_hook_watches_exactly_the_registry_list():
    from wildmerge._autoload import _POST_IMPORT_HOOKS

    ours = [m for m in _POST_IMPORT_HOOKS if m.startswith("wildmerge.")]
    assert ours == list(METHOD_MODULES)
    assert len(OURS) == sum(len(importlib.import_module(m).METHODS) for m in METHOD_MODULES) >= 12


@pytest.mark.parametrize("recipe", [r for r in list_method_recipes() if r not in (
    "com", "regmean", "mats", "fisher", "prodistill", "localize_stitch_trained", "adamerging", "adamerging_pp")])
def test_every_method_recipe_passes_the_declared_checks(recipe):
    data = load_method_recipe(recipe)
    config = MergeConfiguration.model_validate({
        **data.recipe, "base_model": "base",
        "models": [{"model": "a", "parameters": dict(data.model_parameters)}]})
    validate_merge_config(config)


def _readme_method_rows():
    """{merge_method: its 'parameters (defaults)' cell} from the README's method table."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| `merge_method` | method | parameters (defaults) |"))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        name, _method, cell = (c.strip() for c in line.strip("|").split(" | ")[:3])
        rows[name.strip("`")] = cell
    return rows


def test_readme_method_table_matches_the_declared_defaults_and_ranges():
    rows = _readme_method_rows()
    assert {"iso_c", "iso_cts", "tsv_m", "task_arithmetic_sb", "ties_sb", *LAYERWISE_METHODS} <= set(rows), \
        "the spectral and layer-wise methods have a row in the README's method table (docs/methods.md lists all)"
    assert set(rows) <= {*OURS, *LAYERWISE_METHODS}
    checked = 0
    for name, cell in rows.items():
        if name not in OURS:
            continue
        fields = OURS[name].params.fields_by_name()
        for key, default, bounds in re.findall(r"`(\w+)` \(([^,)]+)(?:, in ([\[(][^\]\)]+[\])]))?", cell):
            assert key in fields, f"README: {name} has no parameter {key!r}"
            assert float(default) == fields[key].default, f"README: default of {name}.{key}"
            if bounds:
                assert bounds == re.sub(r"\.0\b", "", interval(fields[key])), f"README: range of {name}.{key}"
            checked += 1
    assert checked >= 7


def test_readme_chain_of_merges_example_uses_the_defaults():
    text = LAYERWISE_DOC.read_text()  # the README links the layer-wise methods' page
    example = re.search(r"merge_method: chain_of_merges\n.*?\nparameters: \{([^}]*)\}", text, re.S)
    given = dict(item.split(": ") for item in example.group(1).split(", "))
    defaults = ChainOfMergesParams().model_dump()
    for key, value in given.items():
        assert str(defaults[key]).lower() == value, f"README's CoM example: {key}"


def test_non_finite_layerwise_solve_says_to_raise_lam_rel():
    from wildmerge.plugins.layerwise.chain import ChainJob, solve_group
    from wildmerge.plugins.layerwise.regmean import GramAccumulator

    job = ChainJob(chain=False, experts=[], base=None, batches=[], config=None,
                   settings=RegMeanParams(ridge="per_task", lam_rel=0.0))
    grams = [GramAccumulator(4, "none") for _ in range(2)]
    for g in grams:
        g.add(torch.randn(8, 4, generator=torch.Generator().manual_seed(0)))
    weights = [{"w": torch.ones(2, 4)}, {"w": torch.ones(2, 4)}]
    weights[1]["w"][0, 0] = float("inf")
    with pytest.raises(WildmergeError, match=r"regmean: the closed-form solve for w gave NaN/Inf.*raise lam_rel"):
        solve_group(job, 0, "qkv", ["w"], weights, {}, grams, None, {})
