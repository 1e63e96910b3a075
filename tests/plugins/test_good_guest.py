"""Installing wildmerge must not change what stock mergekit does with its own methods.

Recipes mergekit accepts merge exactly as without wildmerge (our objections are stderr warnings); vocabulary
differences go through mergekit's tokenizer options; NaN/Inf weights are refused by wildmerge's commands and
warned about by the stock entry points; the start-up hook registers our methods whatever is imported first. Every
change to mergekit or lm-eval is one of ``plugins/host_patches.CHANGES``, and each is checked from that list.
"""

import ast
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from mergekit.config import MergeConfiguration
from mergekit.merge import run_merge
from mergekit.options import MergeOptions
from safetensors.torch import load_file, save_file

from helpers import make_tiny_model
from wildmerge.checkpoints import check_compatible
from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.plugins import host_patches
from wildmerge.plugins.entrypoint import wildmerge_checks

KEY = "model.layers.0.self_attn.q_proj.weight"


def merge(config: dict, out, **options):
    run_merge(MergeConfiguration.model_validate(config), str(out),
              options=MergeOptions(**{"copy_tokenizer": False, "quiet": True, **options}), config_source=yaml.safe_dump(config))
    return out


def two_experts(family, method, **params):
    """Two weighted experts; linear has no base, slerp's base is one of its two inputs (as in mergekit's tests)."""
    base, (a, b) = family["base"], family["experts"][:2]
    base = {"linear": None, "slerp": a}.get(method, base)
    config = {"merge_method": method, "dtype": "float32", "parameters": params,
              "models": [{"model": a, "parameters": {"weight": 0.7}}, {"model": b, "parameters": {"weight": 0.3}}]}
    return {**config, "base_model": base} if base else config


def tensor(folder, key=KEY):
    return load_file(os.path.join(folder, "model.safetensors"))[key].double()


# ---------------------------------------------------------------- mergekit's methods merge as without us


def test_shared_weight_on_linear_with_t_merges_and_warns_with_did_you_mean(tiny_family, tmp_path, capfd):
    config = two_experts(tiny_family, "linear", t=0.5, wieght=1.0)
    out = merge(config, tmp_path / "out")
    a, b = (tensor(p) for p in tiny_family["experts"][:2])
    assert torch.allclose(tensor(out), (0.7 * a + 0.3 * b) / 1.0, atol=1e-6)  # linear: normalised weighted mean
    err = capfd.readouterr().err
    assert "wildmerge: warning: parameters: unknown parameter 't' for merge_method 'linear'" in err
    assert "unknown parameter 'wieght'" in err and "did you mean 'weight'" in err


@pytest.mark.parametrize("method", ["model_stock", "slerp"])
def test_output_is_bit_identical_to_mergekit_without_wildmerge(tiny_family, tmp_path, method, capfd):
    """The same recipe (carrying parameters the method ignores) through our wrapped run_merge and through
    mergekit's own, unwrapped one (``__wrapped__``); mergekit's suite in .ci runs the stock CLI both ways."""
    import mergekit.merge

    config = two_experts(tiny_family, method, t=0.3, density=0.5)
    ours = merge(config, tmp_path / "ours")
    assert "wildmerge: warning" in capfd.readouterr().err
    stock = tmp_path / "stock"
    mergekit.merge.run_merge.__wrapped__(MergeConfiguration.model_validate(config), str(stock),
                                         options=MergeOptions(copy_tokenizer=False, quiet=True))
    with_, without = load_file(ours / "model.safetensors"), load_file(stock / "model.safetensors")
    assert with_.keys() == without.keys()
    assert all(torch.equal(with_[k], without[k]) for k in without)


def test_wildmerge_merge_warns_by_default_and_refuses_with_strict(tiny_family, tmp_path, capfd):
    from wildmerge.cli import main

    recipe = tmp_path / "r.yml"
    recipe.write_text(yaml.safe_dump(two_experts(tiny_family, "slerp", t=0.5)))  # 'weight' is not slerp's
    assert main(["merge", "--strict", str(recipe), str(tmp_path / "strict"), "--no-copy-tokenizer"]) == 2
    assert "unknown parameter 'weight' for merge_method 'slerp'" in capfd.readouterr().err
    assert not (tmp_path / "strict").exists()
    assert main(["merge", str(recipe), str(tmp_path / "lenient"), "--no-copy-tokenizer"]) == 0
    assert "wildmerge: warning" in capfd.readouterr().err
    assert (tmp_path / "lenient" / "model.safetensors").is_file()


def test_our_methods_stay_strict_through_the_python_api(tiny_family, tmp_path):
    config = two_experts(tiny_family, "iso_c", t=0.5)
    with pytest.raises(ConfigError, match="unknown parameter 't' for merge_method 'iso_c'"):
        merge(config, tmp_path / "out")


def test_unknown_method_close_to_ours_is_an_error_else_mergekit_decides(tiny_family, tmp_path, capfd):
    with pytest.raises(ConfigError, match="did you mean 'tsv_m'"):
        merge(two_experts(tiny_family, "tsv_mm"), tmp_path / "a")
    with pytest.raises(RuntimeError, match="Unimplemented merge method"):  # mergekit's own error, as without us
        merge(two_experts(tiny_family, "lineer"), tmp_path / "b")
    assert "unknown merge_method 'lineer' (did you mean 'linear'?)" in capfd.readouterr().err


# ---------------------------------------------------------------- vocabularies: mergekit's mechanisms


def add_tokenizer(path, n, added=()):
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(n)}
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, "t0")),
                                   unk_token="t0")
    fast.add_tokens(list(added))
    fast.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def vocab_family(tmp_path_factory):
    """A base (64 tokens), an expert of it, and an expert with two added tokens (66 rows)."""
    root = tmp_path_factory.mktemp("vocab")
    base = add_tokenizer(make_tiny_model(root / "base", vocab_size=64), 64)
    same = add_tokenizer(make_tiny_model(root / "same", base=base, noise=0.02, seed=1), 64)
    wide = make_tiny_model(root / "wide", vocab_size=66, seed=2)
    shared = load_file(f"{base}/model.safetensors")  # everything but the vocabulary rows from the base
    weights = load_file(f"{wide}/model.safetensors")
    for k, v in shared.items():
        weights[k] = v + 0.02 * torch.randn_like(v) if weights[k].shape == v.shape else weights[k]
    save_file(weights, f"{wide}/model.safetensors", metadata={"format": "pt"})
    add_tokenizer(wide, 64, ["<|im_start|>", "<|im_end|>"])
    return {"base": base, "same": same, "wide": wide, "root": root}


def vocab_recipe(fam, method, tokenizer=None, **params):
    config = {"merge_method": method, "base_model": fam["base"], "dtype": "float32",
              "models": [{"model": fam["same"], "parameters": {"weight": 0.5}},
                         {"model": fam["wide"], "parameters": {"weight": 0.5}}]}
    if params:
        config["parameters"] = params
    if tokenizer:
        config["tokenizer"] = {"source": tokenizer}
    return config


def test_compatibility_rule_lets_vocabularies_differ_but_not_hidden_sizes(vocab_family, tmp_path):
    fam = vocab_family
    assert check_compatible(fam["base"], {"same": fam["same"], "wide": fam["wide"]}) == {"wide": (66, 64)}
    with pytest.raises(WildmergeError, match=r"wide .*vocabulary of 66 tokens vs base 64"):
        check_compatible(fam["base"], {"wide": fam["wide"]}, same_vocab=True)
    wider = make_tiny_model(tmp_path / "wider", hidden=48)
    with pytest.raises(WildmergeError, match=r"hidden_size: 48 vs base 32"):
        check_compatible(fam["base"], {"wider": wider})
    deeper = make_tiny_model(tmp_path / "deeper", layers=3)
    with pytest.raises(WildmergeError, match=r"num_hidden_layers: 3 vs base 2"):
        check_compatible(fam["base"], {"deeper": deeper})


def test_layer_range_recipes_may_combine_models_of_different_depths(vocab_family, tmp_path):
    """A frankenmerge (passthrough slices) of a 2-layer and a 3-layer model is mergekit's business, not refused."""
    deeper = make_tiny_model(tmp_path / "deeper", layers=3)
    config = {"merge_method": "passthrough", "base_model": vocab_family["base"], "dtype": "float32",
              "slices": [{"sources": [{"model": vocab_family["base"], "layer_range": [0, 2]}]},
                         {"sources": [{"model": deeper, "layer_range": [2, 3]}]}]}
    with wildmerge_checks(strict_params=True):
        out = merge(config, tmp_path / "out")
    assert "model.layers.2.mlp.down_proj.weight" in load_file(str(out / "model.safetensors"))


@pytest.mark.parametrize("method,tokenizer", [("ties", "base"), ("iso_c", "union")])
def test_tokenizer_section_merges_added_tokens(vocab_family, tmp_path, method, tokenizer):
    params = {"density": 0.5} if method == "ties" else {}
    config = vocab_recipe(vocab_family, method, tokenizer, **params)
    with wildmerge_checks():
        out = merge(config, tmp_path / "out", copy_tokenizer=True)
    rows = 64 if tokenizer == "base" else 66
    merged = load_file(str(out / "model.safetensors"))
    assert merged["model.embed_tokens.weight"].shape == (rows, 32) and merged["lm_head.weight"].shape == (rows, 32)
    assert torch.isfinite(merged["lm_head.weight"]).all()


def test_vocab_difference_without_tokenizer_section_says_how_to_align(vocab_family, tmp_path, capfd):
    config = vocab_recipe(vocab_family, "ties", density=0.5)
    with wildmerge_checks(), pytest.raises(WildmergeError, match=r"wide: 66 tokens vs base 64.*tokenizer: \{source"):
        merge(config, tmp_path / "a")
    with pytest.raises(ValueError, match="Tensor size mismatch"):  # as a guest: mergekit's own refusal
        merge(config, tmp_path / "b")
    assert "wildmerge: warning: vocabularies differ" in capfd.readouterr().err


def test_regmean_refuses_a_tokenizer_section_clearly(vocab_family, tmp_path):
    config = vocab_recipe(vocab_family, "regmean", "base")
    for m in config["models"]:
        m.pop("parameters")
    with pytest.raises(ConfigError, match="regmean always merges on the base's tokens .*takes no 'tokenizer:'"):
        merge(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- NaN / Inf weights


@pytest.fixture
def nan_expert(tiny_family, tmp_path):
    bad = tmp_path / "poisoned"
    shutil.copytree(tiny_family["experts"][1], bad)
    weights = load_file(str(bad / "model.safetensors"))
    weights[KEY][0, 0] = float("nan")
    save_file(weights, str(bad / "model.safetensors"), metadata={"format": "pt"})
    return str(bad)


def nan_recipe(tiny_family, nan_expert, method):
    config = two_experts(tiny_family, method)
    config["models"][1]["model"] = nan_expert
    if method == "ties":
        config["parameters"] = {"density": 0.5}
    return config


@pytest.mark.parametrize("method", ["task_arithmetic", "ties", "model_stock"])
def test_nan_weights_refused_by_wildmerge_commands_naming_tensor_and_model(tiny_family, nan_expert, tmp_path, method):
    from wildmerge.cli import main

    recipe = tmp_path / "r.yml"
    recipe.write_text(yaml.safe_dump(nan_recipe(tiny_family, nan_expert, method)))
    with wildmerge_checks(), pytest.raises(WildmergeError, match=rf"NaN or Inf .*{KEY} \(from .*poisoned"):
        merge(yaml.safe_load(recipe.read_text()), tmp_path / "api")
    assert main(["merge", str(recipe), str(tmp_path / "cli"), "--no-copy-tokenizer"]) == 2
    assert not (tmp_path / "cli").exists()  # nothing half-written is left behind


def test_nan_weights_through_the_stock_path_merge_as_mergekit_does_with_a_warning(tiny_family, nan_expert, tmp_path,
                                                                                   capfd):
    out = merge(nan_recipe(tiny_family, nan_expert, "task_arithmetic"), tmp_path / "out")
    assert torch.isnan(tensor(out)).any()  # mergekit's behaviour, unchanged
    err = capfd.readouterr().err
    assert "wildmerge: warning:" in err and KEY in err and "poisoned" in err


def test_nan_weights_refused_by_our_methods(tiny_family, nan_expert, tmp_path):
    with pytest.raises(ConfigError, match=rf"{KEY}.*poisoned.*NaN or Inf"):
        merge(nan_recipe(tiny_family, nan_expert, "iso_c"), tmp_path / "out")


# ---------------------------------------------------------------- the start-up hook


def python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, **env), check=True)


OURS = ("from mergekit.merge_methods import registered_methods; "
        "print(sorted(m.spec.name for m in registered_methods() if getattr(m, '__wildmerge__', False)))")


@pytest.mark.parametrize("first", ["wildmerge.plugins.methods", "wildmerge.plugins.spectral",
                                   "wildmerge.plugins.norm_methods", "wildmerge.plugins.baselines",
                                   "wildmerge.plugins.lines", "wildmerge.plugins.knots",
                                   "wildmerge.plugins.localize_stitch"])
def test_hook_registers_our_methods_whatever_is_imported_first(first):
    done = python(f"import {first}; {OURS}")
    assert done.stderr == ""  # no "could not hook into ...: partially initialized module"
    assert done.stdout.strip() == ("['consensus_ta', 'iso_c', 'iso_cts', 'knots_ties', 'lines_consensus', 'lines_ta', "
                                   "'localize_stitch', 'metagpt', 'norm_avg', 'star', 'task_arithmetic_sb', 'ties_sb', "
                                   "'tsv_lossless', 'tsv_m']")


def test_hook_can_be_turned_off():
    code = "import sys; print(any('_PostImportFinder' in repr(f) for f in sys.meta_path))"
    assert python(code).stdout.strip() == "True"
    assert python(code, WILDMERGE_AUTOLOAD="0").stdout.strip() == "False"


def test_sampler_refuses_a_nan_merge_and_marks_nothing_done(tiny_family, nan_expert, tmp_path, capsys):
    from wildmerge.cli import main

    pool = tmp_path / "pool.yml"
    pool.write_text(f"name: tiny\nbase: {{model: {tiny_family['base']}}}\nexperts:\n"
                    f"  - {{model: {tiny_family['experts'][0]}, name: fine}}\n  - {{model: {nan_expert}, name: bad}}\n")
    run = tmp_path / "run"
    argv = ["sample", "--base", str(pool), "--out", str(run), "--sizes", "2", "--methods", "ta", "--no-evaluate"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "NaN or Inf" in err and KEY in err and "poisoned" in err
    assert not [p for p in (run / "models").glob("*/merge_info.json")]


@pytest.mark.parametrize("first", ["wildmerge.plugins.task_vector_method", "wildmerge.plugins.method_params"])
def test_a_shared_module_imported_first_leaves_registration_for_later_without_a_warning(first):
    """task_vector_method imports mergekit half-way through; the hook must wait, not print an error."""
    done = python(f"import {first}; import wildmerge.plugins.methods; {OURS}")
    assert done.stderr == ""
    assert "'iso_c'" in done.stdout and "'tsv_m'" in done.stdout and "'localize_stitch'" in done.stdout


# ---------------------------------------------------------------- every change to the hosts, from the one list

ROOT = Path(__file__).resolve().parents[2]
REPLACED = [c for c in host_patches.CHANGES if c.scope != "registry"]


def _applier(change):
    module, _, name = change.applied_by.partition(":")
    return getattr(importlib.import_module(module), name)


def _apply(change):
    """Put ``change`` in place as wildmerge does (the start-up hook hands over the imported module)."""
    if change.applied_by.endswith(":on_merge_module_imported"):
        return _applier(change)(sys.modules["mergekit.merge"])
    return _applier(change)()


@pytest.mark.parametrize("change", host_patches.CHANGES, ids=lambda c: c.target)
def test_every_change_names_a_host_target_a_reason_an_off_switch_and_a_test_that_exist(change):
    module, _, attribute = change.target.rpartition(".")
    assert hasattr(importlib.import_module(module), attribute), f"{change.target} is gone from the installed host"
    path, _, name = change.test.partition("::")
    assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.MULTILINE), change.test
    assert callable(_applier(change)) and change.reason and change.off
    assert change.scope in ("process", "block", "registry")


@pytest.mark.parametrize("change", REPLACED, ids=lambda c: c.target)
def test_each_replacement_goes_in_once_and_the_hosts_own_stays_reachable(change):
    module, _, attribute = change.target.rpartition(".")
    module = importlib.import_module(module)
    own, before = host_patches.original(change.target), getattr(module, attribute)
    try:
        if change.scope == "block":
            assert before is own  # outside wildmerge's own merges: the host's
            with _applier(change)():
                ours = getattr(module, attribute)
                with _applier(change)():  # re-entrant
                    assert getattr(module, attribute) is ours
                assert getattr(module, attribute) is ours
            assert getattr(module, attribute) is own
        else:
            _apply(change)
            ours = getattr(module, attribute)
            _apply(change)  # a second time changes nothing
            assert getattr(module, attribute) is ours
    finally:
        setattr(module, attribute, before)
    assert ours is not own and host_patches.is_ours(ours) and host_patches.original(change.target) is own


def test_with_the_hook_off_mergekit_is_its_own():
    off = [c.target for c in REPLACED if c.off.startswith("WILDMERGE_AUTOLOAD=0")]
    code = ("import importlib, mergekit.merge; from wildmerge.plugins import host_patches as h\n"
            f"print([h.is_ours(getattr(importlib.import_module(t.rpartition('.')[0]), t.rpartition('.')[2])) "
            f"for t in {off!r}])")
    assert off and python(code, WILDMERGE_AUTOLOAD="0").stdout.strip() == str([False] * len(off))
    assert python(code).stdout.strip() == str([True] * len(off))


def test_an_unlisted_change_is_refused():
    with pytest.raises(KeyError, match="not a listed host change"):
        host_patches.replace("mergekit.merge.MergeOptions", lambda original: original)


def _host_names(tree) -> set:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            for alias in node.names:
                full = alias.name if isinstance(node, ast.Import) else f"{module}.{alias.name}"
                if full.split(".")[0] in ("mergekit", "lm_eval"):
                    names.add((alias.asname or alias.name).split(".")[0])
    return names


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def test_no_module_but_the_door_writes_into_mergekit_or_lm_eval():
    """No ``host_module.x = ...`` or ``setattr(host_module, ...)`` outside ``plugins/host_patches.py``."""
    writes = []
    for path in (ROOT / "wildmerge").rglob("*.py"):
        tree = ast.parse(path.read_text())
        hosts = _host_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                written = [t for t in node.targets if isinstance(t, ast.Attribute)]
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Attribute):
                written = [node.target]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                written = node.args[:1]
            else:
                written = []
            writes += [f"{path.name}:{node.lineno}" for t in written if _root(t) in hosts]
    assert not writes, writes

