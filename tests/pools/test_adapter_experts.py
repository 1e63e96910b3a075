"""LoRA adapters as pool experts: folded into the base once (W + alpha/r * B A), cached, pinned, merged."""

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.cli import main

R, ALPHA = 4, 8


@pytest.fixture(scope="module")
def adapter(lm_family, tmp_path_factory):  # noqa: F811
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_pretrained(lm_family["base"], dtype=torch.float32)
    config = LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    path = tmp_path_factory.mktemp("adapter") / "my_lora"
    peft_model.save_pretrained(str(path))
    return path


def test_adapter_expert_is_materialised_once_and_merged(lm_family, adapter, tmp_path, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setenv("WILDMERGE_ADAPTER_CACHE", str(tmp_path / "cache"))
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "lora", "base": {"model": lm_family["base"]},
                                    "experts": [{"model": lm_family["experts"][0], "name": "full"},
                                                {"model": str(adapter), "name": "lora"}]}))
    run = tmp_path / "run"
    argv = ["sample", "--base", str(pool), "--out", str(run), "--methods", "ta", "--sizes", "1", "--no-evaluate"]
    assert main(argv) == 0
    assert "lora: adapter" in capsys.readouterr().out
    manifest = json.loads((run / "manifest.json").read_text())
    lora = next(e for e in manifest["models"]["experts"] if e["name"] == "lora")
    assert lora["adapter"] == str(adapter) and lora["path"].startswith(str(tmp_path / "cache"))

    # the materialised expert against float64 W + (alpha / r) B A, from the adapter file itself
    base = load_file(f"{lm_family['base']}/model.safetensors")
    merged = load_file(f"{lora['path']}/model.safetensors")
    ad = load_file(str(adapter / "adapter_model.safetensors"))
    folded = 0
    for name, w in base.items():
        stem = name.removesuffix(".weight")
        a = next((v for k, v in ad.items() if k.endswith(f"{stem}.lora_A.weight")), None)
        if a is None:
            assert torch.equal(merged[name], w), name
            continue
        b = next(v for k, v in ad.items() if k.endswith(f"{stem}.lora_B.weight"))
        want = w.double() + (ALPHA / R) * (b.double() @ a.double())
        assert torch.allclose(merged[name].double(), want, atol=1e-5), name
        folded += 1
    assert folded == 2 * 2  # q_proj and v_proj in both layers

    stamp = (tmp_path / "cache").stat().st_mtime_ns, sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert main(argv) == 0  # reused, not rebuilt
    assert ((tmp_path / "cache").stat().st_mtime_ns, sorted(p.name for p in (tmp_path / "cache").iterdir())) == stamp

    # --no-full holds with adapter experts too (the materialised folder's variable once shadowed the setting)
    assert main([*argv[:4], str(tmp_path / "alone"), *argv[5:], "--no-full"]) == 0
    manifest = json.loads((tmp_path / "alone" / "manifest.json").read_text())
    assert [s["n"] for s in manifest["subsets"]] == [1, 1] and manifest["sampling"]["full"] is False


def test_the_diagnostics_read_an_adapter_expert_as_its_folded_checkpoint(lm_family, adapter, tmp_path, monkeypatch,
                                                                          capsys):  # noqa: F811
    """`analyze norms` / `analyze geometry` on a pool with a LoRA adapter expert (the SmolLM2 family's sentiment and
    topic) once refused it ("no config.json"); they now fold it into the base like the sampler does, and its
    task-vector norm is that of the folded checkpoint, (alpha / r) B A."""
    import pandas as pd

    monkeypatch.setenv("WILDMERGE_ADAPTER_CACHE", str(tmp_path / "cache"))
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "lora", "base": {"model": lm_family["base"]},
                                    "experts": [{"model": lm_family["experts"][0], "name": "full"},
                                                {"model": str(adapter), "name": "lora"}]}))
    assert main(["analyze", "norms", "--pool", str(pool), "--out", str(tmp_path / "norms")]) == 0
    assert "lora: adapter" in capsys.readouterr().out
    rows = pd.read_csv(tmp_path / "norms" / "imbalance.csv")
    ad = load_file(str(adapter / "adapter_model.safetensors"))
    want = sum(float(((ALPHA / R) * (ad[k.replace("lora_A", "lora_B")].double() @ ad[k].double())).pow(2).sum())
               for k in ad if "lora_A" in k) ** 0.5
    layer = "layer" if "layer" in rows.columns else rows.columns[0]
    model_rows = rows[(rows["expert"] == "lora") & (rows[layer].astype(str) == "model")]
    assert len(model_rows) == 1 and abs(float(model_rows["norm"].iloc[0]) - want) < 1e-3 * want
    assert main(["analyze", "geometry", "--pool", str(pool), "--out", str(tmp_path / "geometry")]) == 0
