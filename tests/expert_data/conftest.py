"""Data laid out as each source kind expects it: records, a hub-like dataset folder, a local lm-eval task."""

import json

import pytest
import yaml

RECORDS = [{"question": f"What is {i} + {i}?", "answer": str(2 * i), "text": f"note {i}"} for i in range(80)]


def hub_like_folder(root):
    """A dataset folder laid out as on the hub (data/<split>-*.parquet), read by datasets.load_dataset."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(RECORDS), root / "data" / "train-00000-of-00001.parquet")
    return root


def lm_eval_task_folder(root):
    """A local lm-eval task with a train split (labelled items come from train, never a scored split)."""
    root.mkdir(parents=True)
    (root / "train.jsonl").write_text("".join(json.dumps({"q": r["question"], "a": r["answer"]}) + "\n"
                                              for r in RECORDS))
    task = {"task": "adder", "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"train": str(root / "train.jsonl"), "test": str(root / "train.jsonl")}},
            "training_split": "train", "test_split": "test", "output_type": "generate_until",
            "doc_to_text": "Q: {{q}}\nA:", "doc_to_target": "{{a}}",
            "metric_list": [{"metric": "exact_match"}], "metadata": {"version": 1.0}}
    (root / "adder.yaml").write_text(yaml.safe_dump(task))
    return root




@pytest.fixture
def records():
    return RECORDS


@pytest.fixture
def hub_folder(tmp_path):
    return hub_like_folder(tmp_path / "hub_set")


@pytest.fixture
def task_folder(tmp_path):
    return lm_eval_task_folder(tmp_path / "tasks")
