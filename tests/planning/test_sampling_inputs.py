"""Every bad input of `wildmerge sample` fails with a clear message before any merge; --dry-run writes nothing."""

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from helpers import make_tiny_model
from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.cli import main
from wildmerge.errors import WildmergeError
from wildmerge.checkpoints import check_compatible


def write_pool(path, base, experts, domains=None):
    lines = ["name: tiny", f"base: {{model: {base}}}", "experts:"]
    for i, e in enumerate(experts):
        lines.append(f"  - {{model: {e}, name: x{i}" + (f", domain: {domains[i]}}}" if domains else "}"))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def pool(tiny_family, tmp_path):
    return write_pool(tmp_path / "pool.yml", tiny_family["base"], tiny_family["experts"])


def fails(capsys, *argv, match):
    assert main(["sample", *argv, "--no-evaluate"]) == 2
    err = capsys.readouterr().err
    assert match in err, err
    return err


def test_unknown_base_method_ablation(capsys, tmp_path):
    fails(capsys, "--base", "qwen3-4", "--out", str(tmp_path / "r"), match="did you mean 'qwen3-4b'")
    fails(capsys, "--methods", "ta,tsvm", "--out", str(tmp_path / "r"), match="unknown method 'tsvm'")
    fails(capsys, "--ablation", "sb_bta", "--out", str(tmp_path / "r"), match="unknown sweep 'sb_bta'")
    assert not (tmp_path / "r").exists()


def test_size_larger_than_pool(capsys, pool, tmp_path):
    fails(capsys, "--base", pool, "--sizes", "2,5", "--out", str(tmp_path / "r"), match="pool 'tiny' has 3 experts")
    assert not (tmp_path / "r").exists()


def test_bad_grid_hyperparameter(capsys, pool, tmp_path):
    grid = tmp_path / "g.yml"
    grid.write_text("g: {method: ties, grid: {densty: [0.5]}}\n")
    fails(capsys, "--base", pool, "--grid", str(grid), "--out", str(tmp_path / "r"), match="no hyperparameter 'densty'")


def test_duplicate_expert_paths(capsys, tiny_family, tmp_path):
    e = tiny_family["experts"][0]
    dup = write_pool(tmp_path / "dup.yml", tiny_family["base"], [e, e + "/", tiny_family["experts"][1]])
    fails(capsys, "--base", dup, "--out", str(tmp_path / "r"), match="same checkpoint")
    assert not (tmp_path / "r").exists()


def test_architecture_mismatch(capsys, tiny_family, tmp_path):
    other = make_tiny_model(tmp_path / "qwen", "qwen3", seed=5)
    bad = write_pool(tmp_path / "bad.yml", tiny_family["base"], [tiny_family["experts"][0], other])
    err = fails(capsys, "--base", bad, "--out", str(tmp_path / "r"), match="x1")
    assert "architecture differs" in err and "model_type" in err and "--exclude" in err
    assert not (tmp_path / "r" / "models").exists()


def test_tensor_shape_mismatch(tiny_family, tmp_path):
    """Same config.json, but one tensor has another shape in the safetensors header."""
    odd = tmp_path / "odd"
    shutil.copytree(tiny_family["experts"][0], odd)
    weights = load_file(str(odd / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj.weight"
    weights[name] = weights[name][:, :-1].contiguous()
    save_file(weights, str(odd / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(WildmergeError, match=r"odd .*1 tensor shape\(s\) differ.*down_proj"):
        check_compatible(tiny_family["base"], {"fine": tiny_family["experts"][1], "odd": str(odd)})
    del weights["model.layers.0.self_attn.q_proj.weight"]
    save_file(weights, str(odd / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(WildmergeError, match="lacks 1 tensor"):
        check_compatible(tiny_family["base"], {"odd": str(odd)})


def test_pickle_only_checkpoint_refused(tiny_family, tmp_path):
    pick = tmp_path / "pickled"
    shutil.copytree(tiny_family["experts"][0], pick)
    (pick / "model.safetensors").rename(pick / "pytorch_model.bin")
    with pytest.raises(WildmergeError, match="only pickle weights.*--allow-pickle"):
        check_compatible(tiny_family["base"], {"p": str(pick)})
    check_compatible(tiny_family["base"], {"p": str(pick)}, allow_pickle=True)


def test_changed_sampling_on_existing_run(capsys, pool, tmp_path):
    run = tmp_path / "r"
    assert main(["sample", "--base", pool, "--out", str(run), "--sizes", "1", "--methods", "ta", "--no-evaluate"]) == 0
    capsys.readouterr()
    err = fails(capsys, "--base", pool, "--out", str(run), "--sizes", "1", "--seed", "1", "--methods", "ta",
                match="already holds subsets drawn differently")
    assert "seed: run has 0, this command asks for 1" in err


def test_keep_models_none_needs_per_model_evaluation(capsys, pool, tmp_path):
    fails(capsys, "--base", pool, "--out", str(tmp_path / "r"), "--keep-models", "none", match="--keep-models none")


def test_dry_run_prints_plan_and_writes_nothing(capsys, pool, tmp_path):
    run = tmp_path / "r"
    assert main(["sample", "--base", pool, "--out", str(run), "--sizes", "1,2", "--k", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "merges: 21 (0 already done)" in out  # 7 paper methods x (2 pairs + full pool)
    assert "GB per merged model" in out and "ties_sb__n03_full" in out
    assert not run.exists()


def test_homogeneous_configurations(capsys, tiny_family, tmp_path):
    p = write_pool(tmp_path / "h.yml", tiny_family["base"], tiny_family["experts"], ["math", "math", "medical"])
    assert main(["sample", "--base", p, "--homogeneous", "--methods", "ta,ties", "--dry-run",
                 "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "ta__domain_math" in out and "ta__domain_all" in out and "ta__domain_medical" not in out  # n = 1
    assert "merges: 4 " in out


def test_evaluation_options_are_checked_before_any_merge(capsys, pool, tmp_path):
    run = tmp_path / "r"
    assert main(["sample", "--base", pool, "--out", str(run), "--sizes", "1", "--methods", "ta", "--evaluate",
                 "--suite", "demo", "--ray-address", "auto"]) == 2
    assert "--ray-address does not apply to the local executor" in capsys.readouterr().err
    assert not (run / "models").exists()
    assert main(["sample", "--base", pool, "--out", str(run), "--evaluate", "--suite", "demo",
                 "--batch-size", "many"]) == 2
    assert "--batch-size must be a whole number >= 1 or auto" in capsys.readouterr().err


def test_the_protocol_chains_merge_eval_report_with_the_eval_options(lm_family, tmp_path, capsys):  # noqa: F811
    """`sample --evaluate` forwards wildmerge eval's options: --limit reaches every job's settings."""
    import json

    run = tmp_path / "run"
    p = write_pool(tmp_path / "lm_pool.yml", lm_family["base"], lm_family["experts"])
    assert main(["sample", "--base", p, "--out", str(run), "--sizes", "1", "--methods", "ta", "--evaluate",
                 "--suite", lm_family["suite"], "--limit", "2"]) == 0
    index = json.loads((run / "eval" / "mini" / "index.json").read_text())
    assert set(index["models"]) == {"base", "expert__x0", "expert__x1", "ta__n02_full"}
    assert {job["settings"]["limit"] for job in index["jobs"].values()} == {2}
    assert (run / "report" / "scores.csv").read_text().count("\n") == 5


def test_empty_methods_is_an_error_not_all(capsys, pool, tmp_path):
    fails(capsys, "--base", pool, "--out", str(tmp_path / "run"), "--methods", "", match="--methods is empty")
    assert not (tmp_path / "run").exists()
