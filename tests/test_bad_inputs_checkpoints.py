"""Damaged or mismatched checkpoints fail with one line naming what and where, before any heavy work:
sharded indexes, missing shards, NaN experts in every analysis, a pickle-only expert
next to a mismatched one."""

import json
import shutil
from pathlib import Path

import pytest

from helpers import make_tiny_model
from wildmerge.cli import main


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt_family")
    base = make_tiny_model(root / "base", seed=0)
    experts = [make_tiny_model(root / f"e{i}", base=base, seed=i + 1, noise=0.1) for i in range(2)]
    sharded = root / "sharded"
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(experts[1]).save_pretrained(str(sharded), max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    return {"root": root, "base": base, "experts": experts, "sharded": str(sharded)}


def _pool(tmp_path, base, experts):
    lines = ["name: p", f"base: {{model: {base}}}", "experts:"]
    lines += [f"  - {{model: {path}, name: {name}}}" for name, path in experts.items()]
    path = tmp_path / "pool.yml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _recipe(tmp_path, base, experts):
    models = "".join(f"  - model: {p}\n    parameters: {{weight: 1.0}}\n" for p in experts)
    path = tmp_path / "recipe.yml"
    path.write_text(f"merge_method: task_arithmetic\nbase_model: {base}\nmodels:\n{models}dtype: float32\n")
    return str(path)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def test_a_damaged_shard_index_is_named(family, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(family["sharded"], bad)
    (bad / "model.safetensors.index.json").write_text('{"weight_map": {')
    assert main(["merge", _recipe(tmp_path, family["base"], [family["experts"][0], str(bad)]),
                 str(tmp_path / "out")]) == 2
    line = _one_line_error(capsys)
    assert str(bad / "model.safetensors.index.json") in line
    assert main(["analyze", "geometry", "--pool", _pool(tmp_path, family["base"], {"bad": str(bad)}),
                 "--out", str(tmp_path / "g")]) == 2
    assert str(bad / "model.safetensors.index.json") in _one_line_error(capsys)


def test_a_missing_shard_is_named_as_missing(family, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(family["sharded"], bad)
    shard = sorted(set(json.loads((bad / "model.safetensors.index.json").read_text())["weight_map"].values()))[-1]
    (bad / shard).unlink()
    assert main(["merge", _recipe(tmp_path, family["base"], [family["experts"][0], str(bad)]),
                 str(tmp_path / "out")]) == 2
    line = _one_line_error(capsys)
    assert f"shard {shard} listed in" in line and "missing" in line and "lacks" not in line


def test_a_pickle_only_expert_does_not_hide_a_mismatched_one(family, tmp_path, capsys):
    pickled = tmp_path / "pickled"
    shutil.copytree(family["experts"][0], pickled)
    import torch
    from safetensors.torch import load_file

    torch.save(load_file(str(pickled / "model.safetensors")), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    wide = make_tiny_model(tmp_path / "wide", hidden=48)
    assert main(["analyze", "geometry", "--pool", _pool(tmp_path, family["base"], {"pk": str(pickled), "wide": wide}),
                 "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert "pk" in err and "pickle" in err and "wide" in err and "hidden_size" in err


@pytest.mark.parametrize("command", [["analyze", "geometry"], ["analyze", "norms"],
                                     ["analyze", "mergeability", "--groups", "weights"]])
def test_no_analysis_runs_on_a_nan_expert(family, tmp_path, capsys, command):
    import torch
    from safetensors.torch import load_file, save_file

    nan = tmp_path / "nan"
    shutil.copytree(family["experts"][0], nan)
    weights = load_file(str(nan / "model.safetensors"))
    name = sorted(weights)[3]
    weights[name][0] = float("nan")
    save_file(weights, str(nan / "model.safetensors"))
    pool = _pool(tmp_path, family["base"], {"good": family["experts"][1], "broken": str(nan)})
    assert main([*command, "--pool", pool, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "broken" in err and name in err and "NaN" in err
    assert not (tmp_path / "out").exists()


def test_stock_mergekit_yaml_warns_naming_a_damaged_index(family, tmp_path):
    """The stock command keeps mergekit's behaviour (its own failure) and our objection is a warning that names the
    file, printed before mergekit reads a tensor."""
    import os
    import subprocess
    import sys

    bad = tmp_path / "bad"
    shutil.copytree(family["sharded"], bad)
    (bad / "model.safetensors.index.json").write_text('{"weight_map": {')
    exe = Path(sys.executable).parent / "mergekit-yaml"
    done = subprocess.run([str(exe), _recipe(tmp_path, family["base"], [family["experts"][0], str(bad)]),
                           str(tmp_path / "out")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    warning = [line for line in done.stderr.splitlines() if line.startswith("wildmerge: warning")]
    assert warning and str(bad / "model.safetensors.index.json") in warning[0], done.stderr[-2000:]
