"""The quick demo family end to end: transformers loads it, mergekit merges it, lm-eval scores it; the build is
bit-for-bit deterministic; a corrupted, partial or moved cache is detected and repaired, never used as is."""

import json
import shutil
from pathlib import Path

import pytest

from wildmerge.families.cache import MANIFEST, checksums
from wildmerge.families.demo.family import ensure_family, family_key, problem, resolve_demo_ref
from wildmerge.errors import ConfigError


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("demo_cache")


@pytest.fixture(scope="module")
def family(cache):
    return ensure_family(cache, seed=0, quick=True, progress=False)


def _load_weights(path):
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


def test_layout_and_manifest(family):
    root = Path(family["root"])
    assert root.name == family_key(0, True)
    assert list(family["experts"]) == ["expert_01", "expert_02", "expert_03"]
    manifest = json.loads((root / MANIFEST).read_text())
    assert manifest["files"] == checksums(root)
    assert {e["name"]: e["domain"] for e in manifest["experts"]} == {e["name"]: e["domain"] for e in
                                                                    family["pool"]["experts"]}
    assert all(e["description"] for e in family["pool"]["experts"])
    assert [e["model"] for e in family["pool"]["experts"]] == ["demo:expert_01", "demo:expert_02", "demo:expert_03"]
    assert problem(root) is None


def test_checkpoints_load_in_transformers_and_answer_in_the_trained_format(family):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(family["base"])
    prompt, answer = "Q: 12+30=\nA:", " 42\n"
    # lm-eval encodes context and continuation apart: the pieces must tokenize like the whole
    whole = tok(prompt + answer, add_special_tokens=False)["input_ids"]
    assert whole == tok(prompt, add_special_tokens=False)["input_ids"] + tok(answer, add_special_tokens=False)["input_ids"]
    assert tok.decode(whole) == prompt + answer
    for path in [family["base"], *family["experts"].values()]:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        assert model.config.model_type == "qwen3"
        with torch.no_grad():
            logits = model(torch.tensor([whole])).logits
        assert logits.shape == (1, len(whole), len(tok)) and torch.isfinite(logits).all()


def test_experts_are_fine_tuned_copies_of_the_base(family):
    base = _load_weights(family["base"])
    for path in family["experts"].values():
        expert = _load_weights(path)
        assert expert.keys() == base.keys()
        deltas = [float((expert[k] - base[k]).norm() / base[k].norm()) for k in base]
        assert max(deltas) > 1e-4  # trained
        assert sum(deltas) / len(deltas) < 0.5  # but still close to the base: a task vector, not a new model


def test_mergekit_task_arithmetic_matches_float64_reference(family, tmp_path):
    """The real mergekit merges the demo checkpoints; the result equals W0 + lambda * sum(Wi - W0) in float64."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    experts = list(family["experts"].values())
    config = MergeConfiguration.model_validate({
        "merge_method": "task_arithmetic", "base_model": family["base"], "dtype": "float32",
        "models": [{"model": e, "parameters": {"weight": 1.0}} for e in experts],
        "parameters": {"lambda": 0.5, "normalize": False},
    })
    run_merge(config, str(tmp_path / "merged"), MergeOptions(copy_tokenizer=True, quiet=True))
    base = {k: v.double() for k, v in _load_weights(family["base"]).items()}
    tvs = [{k: v.double() - base[k] for k, v in _load_weights(e).items()} for e in experts]
    merged = _load_weights(tmp_path / "merged")
    assert merged.keys() == base.keys()
    for k in base:
        expected = base[k] + 0.5 * sum(tv[k] for tv in tvs)
        assert (merged[k].double() - expected).abs().max() < 1e-5, k
    assert (tmp_path / "merged" / "tokenizer.json").is_file()


def score_model(path, tasks_dir, task_names, limit=None, out=None):
    """{task: score} of one checkpoint through the evaluation harness, on the family's task files."""
    import tempfile

    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.options import EvalOptions
    from wildmerge.eval.store import ResultStore
    from wildmerge.eval.suites import load_suite

    demo = load_suite("demo")
    suite = demo.model_copy(update={"include_path": str(tasks_dir),
                                    "tasks": [t for t in demo.tasks if t.task in task_names]})
    with tempfile.TemporaryDirectory() as tmp:
        summary = evaluate_models([str(path)], suite, out or tmp, EvalOptions(limit=limit or None))
        record = ResultStore(summary["store"]).load(summary["index"][str(path)])
    names = {t.name: t.task for t in suite.tasks}
    return {names.get(k, k): v for k, v in record["scores"].items()}


def test_lm_eval_scores_every_task(family):
    scores = score_model(family["experts"]["expert_01"], family["tasks"], family["task_names"], limit=8)
    assert set(scores) == set(family["task_names"]) and len(scores) == 6
    assert all(0.0 <= s <= 1.0 for s in scores.values())
    yaml_text = (Path(family["tasks"]) / "demo_add.yaml").read_text()
    assert str(Path(family["tasks"]) / "add.jsonl") in yaml_text  # absolute data path


def test_the_generation_task_scores_exact_answers(family, tmp_path):
    """Targets set to the model's own greedy answers (from transformers) score 1; impossible targets score 0."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wildmerge.families.demo.tasks import write_task_yamls

    tasks = tmp_path / "tasks"
    shutil.copytree(family["tasks"], tasks)
    rows = [json.loads(line) for line in (tasks / "add.jsonl").read_text().splitlines()][:6]
    tok = AutoTokenizer.from_pretrained(family["base"])
    model = AutoModelForCausalLM.from_pretrained(family["base"], dtype=torch.float32)
    for row in rows:
        ids = tok(row["prompt"], return_tensors="pt", add_special_tokens=False)["input_ids"]
        out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
        row["answer"] = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).split("\n")[0].strip()
    (tasks / "add.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_task_yamls(tasks)
    assert score_model(family["base"], tasks, ["demo_add_gen"]) == {"demo_add_gen": 1.0}
    for row in rows:
        row["answer"] = "never"
    (tasks / "add.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert score_model(family["base"], tasks, ["demo_add_gen"]) == {"demo_add_gen": 0.0}


def test_same_seed_same_weights_bit_for_bit(family, tmp_path):
    again = ensure_family(tmp_path, seed=0, quick=True, progress=False)
    first = json.loads(Path(family["manifest"]).read_text())["files"]
    second = json.loads(Path(again["manifest"]).read_text())["files"]
    assert first == second  # every safetensors, tokenizer and data file has the same SHA-256
    other = ensure_family(tmp_path, seed=1, quick=True, progress=False)
    third = json.loads(Path(other["manifest"]).read_text())["files"]
    assert third["base/model.safetensors"] != first["base/model.safetensors"]


def test_cache_is_reused_without_rebuilding(family, cache, capsys):
    before = Path(family["manifest"]).stat().st_mtime_ns
    again = ensure_family(cache, seed=0, quick=True, progress=False)
    assert again == family and Path(again["manifest"]).stat().st_mtime_ns == before
    assert "rebuilding" not in capsys.readouterr().out


def test_a_build_waits_for_a_live_holder_of_its_lock_and_not_for_a_killed_one(family, cache):
    """The build lock is wildmerge.locks' claim: a second process waits, and a holder killed with SIGKILL (as the
    out-of-memory killer would) leaves no stuck lock."""
    import subprocess
    import sys
    import threading
    import time

    lock = cache / f".{family_key(0, True)}.lock"
    code = ("import sys, time; from wildmerge.locks import try_claim; c = try_claim(sys.argv[1]); "
            "print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    result = {}
    try:
        assert holder.stdout.readline().strip() == "held"
        waiting = threading.Thread(target=lambda: result.update(
            ensure_family(cache, seed=0, quick=True, progress=False)))
        waiting.start()
        time.sleep(1.0)
        assert waiting.is_alive() and not result  # waits while the holder lives
    finally:
        holder.kill()
        holder.wait()
    waiting.join(60)
    assert result == family


def test_corrupted_partial_and_leftover_caches_are_rebuilt(tmp_path, capsys):
    info = ensure_family(tmp_path, seed=2, quick=True, progress=False)
    root = Path(info["root"])
    good = json.loads((root / MANIFEST).read_text())["files"]
    weights = root / "experts" / "expert_02" / "model.safetensors"

    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # one flipped byte inside the tensors
    weights.write_bytes(bytes(data))
    assert "checksum" in problem(root)
    info = ensure_family(tmp_path, seed=2, quick=True, progress=False)
    assert "rebuilding" in capsys.readouterr().out
    assert checksums(root) == good and problem(root) is None

    (root / "experts" / "expert_03" / "model.safetensors").unlink()  # a missing file
    assert "missing" in problem(root)
    ensure_family(tmp_path, seed=2, quick=True, progress=False)
    assert checksums(root) == good

    (root / MANIFEST).unlink()  # a build killed before its completion marker
    (tmp_path / f".{root.name}.tmp-killed").mkdir()  # and the temp folder it left
    assert "partial" in problem(root)
    ensure_family(tmp_path, seed=2, quick=True, progress=False)
    assert checksums(root) == good and not (tmp_path / f".{root.name}.tmp-killed").exists()


def test_a_moved_family_gets_task_yamls_for_its_new_place(family, tmp_path):
    moved = tmp_path / "elsewhere"
    shutil.copytree(family["root"], moved / Path(family["root"]).name)
    info = ensure_family(moved, seed=0, quick=True, progress=False)
    assert info["tasks"].startswith(str(moved))
    text = (Path(info["tasks"]) / "demo_facts.yaml").read_text()
    assert str(moved) in text and str(Path(family["root"])) not in text
    import yaml

    pool = yaml.safe_load(Path(info["pool_file"]).read_text())
    assert pool["base"]["model"] == info["base"] and len(pool["experts"]) == 3


def test_resolve_demo_ref(family, cache, monkeypatch):
    monkeypatch.setenv("WILDMERGE_DEMO_CACHE", str(cache))
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    assert resolve_demo_ref("demo:base") == family["base"]
    assert resolve_demo_ref("demo:expert_02") == family["experts"]["expert_02"]
    assert resolve_demo_ref("demo:tasks") == family["tasks"]
    with pytest.raises(ConfigError, match="expert_01"):
        resolve_demo_ref("demo:expert_1")
    with pytest.raises(ConfigError, match="only 3 experts"):
        resolve_demo_ref("demo:expert_07")
    with pytest.raises(ConfigError, match="not a demo reference"):
        resolve_demo_ref("base")
    monkeypatch.setenv("WILDMERGE_DEMO_SEED", "x")
    with pytest.raises(ConfigError, match="WILDMERGE_DEMO_SEED"):
        resolve_demo_ref("demo:base")


def test_cli_build_reuses_the_cache_and_refuses_bad_options(family, cache, capsys):
    from wildmerge.cli import main

    assert main(["demo", "build", "--quick", "--out", str(cache)]) == 0
    out = capsys.readouterr().out
    assert family["base"] in out and "expert_03" in out and "[knowledge]" in out
    with pytest.raises(SystemExit) as exit_:  # refused when the arguments are parsed
        main(["demo", "build", "--quick", "--out", str(cache), "--threads", "0"])
    assert exit_.value.code == 2 and "argument --threads" in capsys.readouterr().err


def test_report_scores_every_model_and_resumes(family, tmp_path, capsys):
    """The honest-signal report through the real pipeline: base, experts and their average (the `ta` recipe with
    normalised weights, checked against a float64 mean), scored by the harness, resumable like any run."""
    from wildmerge.protocol import family_report
    from wildmerge.run import RunFolder

    table = family_report(family, out_dir=tmp_path, limit=4)
    assert [r["model"] for r in table["rows"]] == ["base", "expert_01", "expert_02", "expert_03", "average_all_experts"]
    assert all(0 <= r[t] <= 1 for r in table["rows"] for t in family["task_names"])
    assert {s["expert"] for s in table["specialists_vs_base"]} == {"expert_01", "expert_02", "expert_03"}
    csv = (tmp_path / "report.csv").read_text().splitlines()
    assert csv[0].startswith("model,domain,skills,demo_add") and len(csv) == 6
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(json.dumps(table))
    assert "| expert_01 | math |" in capsys.readouterr().out
    from wildmerge.analysis.report.environment import files_digest  # what the table was made with, as a report says

    (built,) = json.loads((tmp_path / "environment.json").read_text())["families"]
    files = json.loads(Path(family["manifest"]).read_text())["files"]
    assert built["key"] == Path(family["root"]).name and built["files_sha256"] == files_digest(files)

    run = RunFolder(tmp_path)
    (merge,) = run.read_plan().merges
    assert merge.method == "ta" and merge.experts == list(family["experts"])
    average = _load_weights(merge.path)
    experts = [_load_weights(p) for p in family["experts"].values()]
    for k, v in average.items():
        expected = sum(e[k].double() for e in experts) / len(experts)
        assert (v.double() - expected).abs().max() < 1e-6, k

    results = run.eval_dir("demo") / "results"
    stamps = {p.name: p.stat().st_mtime_ns for p in results.iterdir()}
    assert len(stamps) == 5
    assert family_report(family, out_dir=tmp_path, limit=4) == table  # a rerun reuses every saved score
    assert stamps == {p.name: p.stat().st_mtime_ns for p in results.iterdir()}