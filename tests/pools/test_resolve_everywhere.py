"""One pool, every command that takes ``--pool`` / ``--base``: all of them see the same experts at the same folders.

The pool holds what once split the callers: a LoRA adapter (folded into the base by some, read as published by
others), an expert with added tokens (checked by some, not by others) and data given by a path relative to the pool
file. Each command is run for real on tiny models, and what it records is compared with ``pools.resolve``.
"""

import json

import pytest
import yaml

from helpers import WILD_ADDED_TOKENS, make_wild_experts, write_suite, write_tasks
from wildmerge.analysis.mergeability.cache import fingerprint
from wildmerge.cli import main
from wildmerge.pools import load_pool, resolve

ADDED = WILD_ADDED_TOKENS
TEXTS = ["Grass is green", "The sky is blue", "Snow is white", "1 plus 1 equals 2", "2 plus 3 equals 5"] * 2


@pytest.fixture(scope="module")
def pool_file(tmp_path_factory):
    """A pool of a full expert, an expert with two added tokens and a LoRA adapter; data in texts.jsonl beside it."""
    root = tmp_path_factory.mktemp("everywhere")
    wild = make_wild_experts(root)
    base = wild["base"]
    (root / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    pool = {"name": "everywhere", "base": {"model": base}, "data": "texts.jsonl",
            "experts": [{"model": "full", "name": "full"}, {"model": "wide", "name": "wide"},
                        {"model": str(root / "lora"), "name": "lora"}]}
    (root / "pool.yml").write_text(yaml.safe_dump(pool, sort_keys=False))
    write_suite(root / "mini.yml", write_tasks(root / "tasks"))
    return root / "pool.yml"


def test_every_command_sees_the_same_experts(pool_file, tmp_path, monkeypatch):
    monkeypatch.setenv("WILDMERGE_ADAPTER_CACHE", str(tmp_path / "adapters"))
    root, pool = pool_file.parent, str(pool_file)
    resolved = resolve(pool)
    names = ["full", "wide", "lora"]
    paths = resolved.experts
    assert list(paths) == names and resolved.expert_names == names
    assert paths["full"] == str(root / "full") and paths["wide"] == str(root / "wide")  # relative to the pool file
    assert resolved.adapters == {"lora": str(root / "lora")}
    assert paths["lora"].startswith(str(tmp_path / "adapters"))  # folded into the base
    assert set(resolved.vocab_differs) == {"wide"}  # added tokens
    data_file = resolved.data["lora"].text.file
    assert data_file == str(root / "texts.jsonl")  # relative data made absolute
    assert resolve(load_pool(pool, exclude=["wide"])).experts == {n: paths[n] for n in ("full", "lora")}

    # sample (the norm-balance selection resolves first, then the manifest): folded paths and the adapter recorded
    run = tmp_path / "run"
    assert main(["sample", "--base", pool, "--out", str(run), "--methods", "ta", "--sizes", "2", "--k", "1",
                 "--no-full", "--no-evaluate", "--select", "balanced"]) == 0
    manifest = json.loads((run / "manifest.json").read_text())
    assert {e["name"]: e["path"] for e in manifest["models"]["experts"]} == paths
    assert {e["name"]: e.get("adapter") for e in manifest["models"]["experts"]} == {"full": None, "wide": None,
                                                                                     "lora": str(root / "lora")}
    assert {e["calibration"]["text"]["file"] for e in manifest["models"]["experts"]} == {data_file}
    assert list(manifest["sampling"]["select"]["norms"]) == names
    assert main(["sample", "--base", pool, "--out", str(tmp_path / "dry"), "--methods", "ta", "--sizes", "2",
                 "--dry-run"]) == 0

    # tune: the selected recipe merges the same folders
    grid = tmp_path / "grid.yml"
    grid.write_text(yaml.safe_dump({"sweep": {"method": "ta", "grid": {"lambda": [0.5, 1.0]}}}))
    assert main(["tune", "--pool", pool, "--grid", str(grid), "--out", str(tmp_path / "tune"), "--samples", "4"]) == 0
    recipe = yaml.safe_load((tmp_path / "tune" / "sweep" / "recipe.yml").read_text())
    assert [m["model"] for m in recipe["models"] if m["model"] != resolved.base_path] == list(paths.values())

    # search: its geometry is computed on the same folders
    search = tmp_path / "search"
    assert main(["search", "--base", pool, "--budget", "2", "--suite", str(root / "mini.yml"), "--limit", "2",
                 "--methods", "ta", "--no-tune", "--out", str(search)]) == 0
    searched = json.loads((search / "search.json").read_text())
    assert {e for c in searched["candidates"] for e in c["experts"]} <= set(names)
    recipes = [json.loads(f.read_text()) for f in (search / "search" / "models").glob("*/search_recipe.json")]
    assert recipes and all(r["models_order"] == [n for n in names if n in r["models_order"]] for r in recipes)

    # analyze geometry / norms / mergeability: the same experts, the same numbers as the search's geometry
    assert main(["analyze", "geometry", "--pool", pool, "--out", str(tmp_path / "geometry")]) == 0
    geometry = json.loads((tmp_path / "geometry" / "geometry.json").read_text())
    assert geometry["experts"] == names
    assert main(["analyze", "norms", "--pool", pool, "--out", str(tmp_path / "norms")]) == 0
    import pandas as pd

    assert list(pd.read_csv(tmp_path / "norms" / "imbalance.csv")["expert"].unique()) == names
    assert main(["analyze", "mergeability", "--pool", pool, "--groups", "weights",
                 "--out", str(tmp_path / "mergeability")]) == 0
    side = json.loads((tmp_path / "mergeability" / "metrics.json").read_text())
    assert side["fingerprints"] == {n: fingerprint(p) for n, p in paths.items()}

    # one folded checkpoint for all of them: the adapter was folded once, then reused
    assert [p.name for p in (tmp_path / "adapters").iterdir() if not p.name.startswith(".")] == [
        paths["lora"].rsplit("/", 1)[1]]


def test_the_demo_pool_declares_its_quick_family(monkeypatch, tmp_path):
    """``WILDMERGE_DEMO_QUICK=1`` cuts the shipped demo pool to the quick family's experts: a rule of the pool file
    (``quick:``), not of the loader; a quick list naming an expert the pool lacks is refused."""
    from wildmerge.families.demo.spec import experts_for
    from wildmerge.errors import ConfigError

    monkeypatch.delenv("WILDMERGE_DEMO_QUICK", raising=False)
    assert len(load_pool("demo").experts) == 12
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    quick = load_pool("demo")
    assert quick.expert_names == [e.name for e in experts_for(True)] and quick.description.endswith("(quick family)")
    assert load_pool("demo", exclude=["expert_02"]).expert_names == ["expert_01", "expert_03"]
    bad = tmp_path / "bad.yml"
    bad.write_text("base: {model: a/b}\nexperts: [{model: c/d}, {model: c/e}]\nquick: {env: X, experts: [f]}\n")
    with pytest.raises(ConfigError, match=r"quick: experts \['f'\] are not in the pool"):
        load_pool(bad)
    with pytest.raises(ConfigError, match="leaves no expert"):
        load_pool("demo", exclude=["expert_01", "expert_02", "expert_03"])
