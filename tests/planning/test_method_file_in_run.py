"""`wildmerge sample --methods ta,PATH`: a method recipe given by its file's path merges in a run beside a shipped
one (its merges are named by the recipe's ``name``; the merge runner once looked that name up among the shipped
recipes and refused it). The file's TA at lambda 0.5 is checked against float64."""

import json
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from helpers import write_pool
from wildmerge.cli import main


def test_a_recipe_file_merges_beside_a_shipped_method(tiny_family, tmp_path):
    pool = write_pool(tmp_path, tiny_family)
    recipe = tmp_path / "my_ta.yml"
    recipe.write_text(yaml.safe_dump({
        "name": "ta_half", "label": "TA 0.5",
        "recipe": {"merge_method": "task_arithmetic", "parameters": {"lambda": 0.5, "normalize": True},
                   "dtype": "float32"},
        "model_parameters": {"weight": 1.0}}))
    run = tmp_path / "run"
    argv = ["sample", "--base", pool, "--out", str(run), "--sizes", "3", "--k", "1", "--methods",
            f"ta,{recipe}", "--no-evaluate", "--seed", "7"]
    assert main(argv) == 0
    merges = {e["method"]: e for e in json.loads((run / "plan.json").read_text())["entries"] if e["kind"] == "merge"}
    assert set(merges) == {"ta", "ta_half"} and merges["ta_half"]["experts"] == merges["ta"]["experts"]
    merged = load_file(str(Path(merges["ta_half"]["path"]) / "model.safetensors"))
    base = load_file(str(Path(tiny_family["base"]) / "model.safetensors"))
    experts = [load_file(str(Path(e) / "model.safetensors")) for e in tiny_family["experts"]]
    for name, w0 in base.items():
        w0 = w0.double()
        expected = w0 + 0.5 * sum(e[name].double() - w0 for e in experts) / len(experts)
        torch.testing.assert_close(merged[name].double(), expected, atol=1e-6, rtol=1e-6)
    assert main(argv) == 0  # the rerun finds both merges done
    assert json.loads((run / "sample_log.json").read_text())["stats"]["skipped"] == 2
