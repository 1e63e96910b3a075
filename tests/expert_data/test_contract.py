"""The per-expert data contract: one schema (``data:``, ``calibration:`` as its alias, a pool default), one reader
for every source kind, checks at pool load, and the missing-data listing of the pre-flight."""

import json

import pytest
import yaml

from wildmerge.errors import ConfigError
from wildmerge.expert_data.check import missing_data
from wildmerge.expert_data.read import expert_items, expert_texts, texts
from wildmerge.expert_data.schema import ExpertData, parse_data, parse_source
from wildmerge.pools import load_pool


def write_pool(tmp_path, experts, data=None, name="p"):
    pool = {"name": name, "base": {"model": "org/base"}, "experts": experts, **({"data": data} if data else {})}
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(pool, sort_keys=False))
    return path

def test_forms_alias_and_pool_default(tmp_path, records):
    assert parse_data("generate", "d").text.kind == "generate"
    assert parse_data("demo:unlabelled/expert_01", "d").text.demo == "demo:unlabelled/expert_01"
    old = parse_data({"data": "org/set", "text_field": "body", "n_samples": 5}, "d").text  # the old recipe keys
    assert (old.dataset, old.field, old.n) == ("org/set", "body", 5)
    both = parse_data({"text": "a.txt", "labelled": {"lm_eval_task": "gsm8k"}}, "d")
    assert both.text.file == "a.txt" and both.labelled.split == "train"
    with pytest.raises(ConfigError, match="exactly one of"):
        parse_source({"file": "a.jsonl", "generate": {}}, "d")
    with pytest.raises(ConfigError, match="unknown key 'feild'.*did you mean 'field'"):
        parse_source({"file": "a.jsonl", "feild": "x"}, "d")
    for n in ("x1", "x2", "x3"):
        (tmp_path / f"{n}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    path = write_pool(tmp_path, [{"model": "org/x1", "calibration": "x1.jsonl"},  # the old key still works
                                 {"model": "org/x2"},
                                 {"model": "org/x3", "data": {"labelled": {"lm_eval_task": "gsm8k"}}}],
                      data={"text": "generate", "labelled": {"file": "{name}.jsonl", "prompt": "question"}})
    pool = load_pool(path)
    d = pool.all_data()
    assert d["x1"].text.file == "x1.jsonl" and d["x1"].labelled.file == "x1.jsonl"  # own text, default labelled
    assert d["x2"].text.kind == "generate" and d["x2"].labelled.file == "x2.jsonl"  # {name} filled in
    assert d["x3"].text.kind == "generate" and d["x3"].labelled.lm_eval_task == "gsm8k"


def test_pool_load_checks_files_fields_and_sizes(tmp_path, records):
    (tmp_path / "x1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cases = [({"file": "nothere.jsonl"}, "nothere.jsonl not found"),
             ({"file": "x1.jsonl", "field": "body"}, "no 'body' field.*answer"),
             ({"file": "x1.jsonl", "template": "{question} {solution}"}, "names field 'solution'"),
             ({"file": "x1.jsonl", "n": 500}, "80 non-empty item.*at least 500")]
    for source, message in cases:
        with pytest.raises(ConfigError, match=message):
            load_pool(write_pool(tmp_path, [{"model": "org/x1", "data": source}]))
    with pytest.raises(ConfigError, match="no 'solution' field"):
        load_pool(write_pool(tmp_path, [{"model": "org/x1", "data": {"labelled": {"file": "x1.jsonl",
                                                                                   "prompt": "question",
                                                                                   "answer": "solution"}}}]))


def test_every_file_kind_and_a_hub_dataset_in_a_local_cache(tmp_path, monkeypatch, records, hub_folder):
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setenv("WILDMERGE_DATA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "a.json").write_text(json.dumps({"data": records}))
    (tmp_path / "a.txt").write_text("".join(r["text"] + "\n\n" for r in records))
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.json", "a.txt", "a.parquet"):
        assert texts(parse_source(str(tmp_path / name), "t"), "t") == [r["text"] for r in records], name
    folder = hub_folder
    source = parse_source({"dataset": str(folder), "template": "{question} {answer}"}, "t")
    assert texts(source, "t")[3] == "What is 3 + 3? 6"
    import shutil

    shutil.rmtree(folder)  # read once: later reads come from the content-keyed cache, offline
    assert texts(source, "t")[3] == "What is 3 + 3? 6"
    labelled = parse_data({"labelled": {"dataset": str(folder), "prompt": "Q: {question}", "answer": "answer"}}, "t")
    assert expert_items(labelled, "x")[2] == {"prompt": "Q: What is 2 + 2?", "answer": "4"}
    missing = parse_source({"dataset": "org/never-cached", "revision": "abc123"}, "t")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(Exception, match="org/never-cached@abc123.*cannot be read.*revision='abc123'"):
        texts(missing, "t")


def test_labelled_items_from_an_lm_eval_train_split(tmp_path, monkeypatch, task_folder):
    monkeypatch.setenv("WILDMERGE_DATA_CACHE", str(tmp_path / "cache"))
    folder = task_folder
    data = parse_data({"labelled": {"lm_eval_task": "adder", "tasks": str(folder)}}, "d")
    items = expert_items(data, "x")
    assert items[5] == {"prompt": "Q: What is 5 + 5?\nA:", "answer": "10"}
    assert expert_texts(data, "x")[5] == "Q: What is 5 + 5?\nA: 10"  # labelled items serve as text too
    with pytest.raises(ConfigError, match="no 'validation' split"):
        expert_items(parse_data({"labelled": {"lm_eval_task": "adder", "tasks": str(folder),
                                              "split": "validation"}}, "d"), "y")


def test_demo_refs_resolve_through_the_hub_hook(tmp_path, monkeypatch):
    monkeypatch.setenv("WILDMERGE_DEMO_CACHE", str(tmp_path))
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    data = load_pool("demo").data_for("expert_02")
    text, items = expert_texts(data, "expert_02"), expert_items(data, "expert_02")
    assert len(text) >= 128 and all(isinstance(t, str) and t for t in text)
    assert items and all(i["prompt"] and i["answer"] for i in items)  # labelled: demo:calibration/<expert>


def test_missing_data_names_experts_and_the_line_to_add():
    data = {"a": parse_data("generate", "d"), "b": None, "c": ExpertData(labelled=parse_source("x.jsonl", "d"))}
    lines = missing_data(data, ["chain_of_merges", "gradient metrics"])
    assert lines[0].startswith("chain_of_merges needs each expert's text data; none for b.") and "data: generate" \
        in lines[0]
    assert lines[1].startswith("gradient metrics needs each expert's labelled data; none for a, b.")
    assert "lm_eval_task" in lines[1]
