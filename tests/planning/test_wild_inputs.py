"""Checkpoints and recipes from the wild: damaged safetensors, missing paths, broken recipe structure, option
traps and output folders that hold something are each one clear line, before any weight is merged."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wildmerge.checkpoints import check_safetensors, tensor_index, tensor_shapes
from wildmerge.cli import main
from wildmerge.errors import WildmergeError


def _damaged_copy(src, dst, how):
    shutil.copytree(src, dst)
    f = Path(dst) / "model.safetensors"
    data = f.read_bytes()
    cut = {"empty": b"", "header": data[:40], "half": data[: len(data) // 2]}[how]
    f.write_bytes(cut)
    return dst


@pytest.mark.parametrize("how,match", [("empty", "is empty"), ("header", "truncated inside its header"),
                                       ("half", r"is truncated: \d+ of \d+ bytes")])
def test_damaged_safetensors_are_named(tiny_family, tmp_path, how, match):
    bad = _damaged_copy(tiny_family["experts"][0], tmp_path / "bad", how)
    for read in (check_safetensors, tensor_shapes, tensor_index):
        arg = bad / "model.safetensors" if read is check_safetensors else bad
        with pytest.raises(WildmergeError, match=match) as err:
            read(arg)
        assert "model.safetensors" in str(err.value) and "download it again" in str(err.value)
    assert check_safetensors(Path(tiny_family["base"]) / "model.safetensors")  # an intact file passes


def test_truncated_expert_in_a_pool_is_refused_before_merging(tiny_family, tmp_path, capsys):
    bad = _damaged_copy(tiny_family["experts"][1], tmp_path / "bad", "half")
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "tiny", "base": {"model": tiny_family["base"]},
                                    "experts": [{"model": tiny_family["experts"][0], "name": "good"},
                                                {"model": str(bad), "name": "bad"}]}))
    run = tmp_path / "run"
    assert main(["sample", "--base", str(pool), "--out", str(run), "--methods", "ta", "--no-evaluate"]) == 2
    err = capsys.readouterr().err
    assert "bad/model.safetensors is truncated" in err and "Traceback" not in err
    assert not (run / "models").exists()


# ---- wildmerge merge ---------------------------------------------------------------------------------------------


def _ta(tiny_family, *models):
    models = models or tiny_family["experts"][:2]
    return {"merge_method": "task_arithmetic", "base_model": tiny_family["base"], "dtype": "float32",
            "models": [{"model": m, "parameters": {"weight": 0.5}} for m in models]}


def _merge_fails(capsys, recipe_text, tmp_path, match, *extra):
    path = tmp_path / "recipe.yml"
    path.write_text(recipe_text)
    assert main(["merge", str(path), str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_broken_recipe_structure_is_one_line(tiny_family, tmp_path, capsys):
    e0 = tiny_family["experts"][0]
    _merge_fails(capsys, yaml.safe_dump({**_ta(tiny_family), "models": []}), tmp_path, "'models:' is empty")
    _merge_fails(capsys, "- a\n- b\n", tmp_path, "must be a YAML mapping")
    _merge_fails(capsys, "merge_method: [task_arithmetic\n", tmp_path, "is not valid YAML at line")
    _merge_fails(capsys, yaml.safe_dump(_ta(tiny_family, e0, e0)), tmp_path, "models[1] repeats models[0]")
    _merge_fails(capsys, yaml.safe_dump(_ta(tiny_family, e0, str(tmp_path / "no_such_model"))), tmp_path,
                 "no_such_model': local folder does not exist")


def test_flags_after_the_paths_are_ours(tiny_family, tmp_path, capsys):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(yaml.safe_dump(_ta(tiny_family)))
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("x")
    assert main(["merge", str(recipe), str(out)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["merge", str(recipe), str(out), "--overwrite"]) == 0  # the refusal's advice, as a user types it
    assert (out / "model.safetensors").is_file() and not (out / "old.txt").exists()


def test_allow_pickle_is_an_option_of_merge(tiny_family, tmp_path, capsys):
    pick = tmp_path / "pickled"
    shutil.copytree(tiny_family["experts"][0], pick)
    import torch
    from safetensors.torch import load_file

    torch.save(load_file(str(pick / "model.safetensors")), pick / "pytorch_model.bin")
    (pick / "model.safetensors").unlink()
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(yaml.safe_dump(_ta(tiny_family, tiny_family["experts"][1], str(pick))))
    assert main(["merge", str(recipe), str(tmp_path / "out")]) == 2
    assert "--allow-pickle" in capsys.readouterr().err
    os.environ.pop("WILDMERGE_ALLOW_PICKLE", None)
    try:
        assert main(["merge", str(recipe), str(tmp_path / "out"), "--allow-pickle"]) == 0
    finally:
        os.environ.pop("WILDMERGE_ALLOW_PICKLE", None)
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_output_path_that_is_a_file_or_read_only(tiny_family, tmp_path, capsys):
    recipe = tmp_path / "recipe.yml"
    recipe.write_text(yaml.safe_dump(_ta(tiny_family)))
    (tmp_path / "afile").write_text("x")
    assert main(["merge", str(recipe), str(tmp_path / "afile")]) == 2
    assert "is a file" in capsys.readouterr().err
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            assert main(["merge", str(recipe), str(ro / "out")]) == 2
            assert "not a writable folder" in capsys.readouterr().err
        finally:
            ro.chmod(0o700)


def test_layerwise_merge_into_a_folder_with_content_deletes_nothing(tiny_family, tmp_path):
    """The stock mergekit-yaml with regmean into a folder that holds other models: refused, nothing deleted."""
    data = tmp_path / "tokens.jsonl"
    data.write_text("".join(json.dumps({"input_ids": [(7 * i + j) % 60 for j in range(8)]}) + "\n" for i in range(8)))
    recipe = {"merge_method": "regmean", "base_model": tiny_family["base"],
              "calibration": {"n_samples": 8, "seq_len": 8, "batch_size": 4},
              "models": [{"model": e, "calibration": str(data)} for e in tiny_family["experts"][:2]]}
    path = tmp_path / "recipe.yml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "models"
    shutil.copytree(tiny_family["experts"][2], out / "keep_me")
    exe = Path(sys.executable).with_name("mergekit-yaml")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([str(exe), str(path), str(out), "--device", "cpu"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode != 0
    assert "is not empty" in proc.stderr.strip().splitlines()[-1]
    assert (out / "keep_me" / "model.safetensors").is_file()


def test_nan_expert_is_refused_by_sample_before_merging(tiny_family, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    nan = tmp_path / "nan_expert"
    shutil.copytree(tiny_family["experts"][0], nan)
    tensors = load_file(str(nan / "model.safetensors"))
    name = sorted(k for k in tensors if "mlp" in k)[0]
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(nan / "model.safetensors"), metadata={"format": "pt"})
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "tiny", "base": {"model": tiny_family["base"]},
                                    "experts": [{"model": tiny_family["experts"][1], "name": "good"},
                                                {"model": str(nan), "name": "poisoned"}]}))
    run = tmp_path / "run"
    argv = ["sample", "--base", str(pool), "--out", str(run), "--methods", "ta", "--no-evaluate"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"poisoned: {name} in {nan / 'model.safetensors'}" in err and "--exclude" in err
    assert not (run / "models").exists()
    assert main([*argv, "--exclude", "poisoned"]) == 0  # the advice works; the clean files are remembered
    checks = json.loads((run / "weight_checks.json").read_text())["finite"]
    assert str(Path(tiny_family["base"]).resolve() / "model.safetensors") in checks and str(nan) not in str(checks)


@pytest.mark.parametrize("flags,match", [(["--limit", "0"], "limit 0"), (["--limit", "-3"], "limit -3"),
                                         (["--device", "gpu"], "device 'gpu'"),
                                         (["--device", "cuda"], "no CUDA GPU")])
def test_bad_evaluation_overrides_fail_before_any_job(tmp_path, capsys, flags, match):
    import torch

    if "cuda" in flags and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from helpers import write_plan, write_suite, write_tasks

    suite = write_suite(tmp_path / "mini.yml", write_tasks(tmp_path / "tasks"))
    run = write_plan(tmp_path / "run", [{"model_id": "base", "kind": "base", "path": str(tmp_path / "absent")}])
    assert main(["eval", str(run), "--suite", suite, "--no-report", *flags]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err
    assert not (run / "eval" / "mini" / "results").exists()


def test_missing_relative_folder_is_named_as_such(tmp_path):
    from wildmerge.hub import resolve_all

    with pytest.raises(WildmergeError) as err:
        resolve_all([("x", "my_models/expert_a", None)], relative_to=tmp_path, download=False)
    msg = str(err.value)
    assert "not in the local Hugging Face cache" in msg and f"not a local folder either (looked in {tmp_path})" in msg
    assert "hf download my_models/expert_a" in msg
