"""``labelled: generate``: labelled items for experts published without any, from the expert's own text (the
first half of each text the prompt, its continuation the answer), so every shipped pool runs the gradient metrics."""

import json

import pandas as pd
import pytest
import yaml

from wildmerge.cli import main
from wildmerge.expert_data.check import missing_data
from wildmerge.expert_data.generate import as_items
from wildmerge.expert_data.read import expert_items, expert_texts
from wildmerge.expert_data.schema import parse_data
from wildmerge.families.demo.family import ensure_family
from wildmerge.named_files import list_names
from wildmerge.pools.schema import load_pool

SMALL = {"n_samples": 4, "max_new_tokens": 12, "prompts": ["", "Q:"]}


def test_items_split_each_text_after_its_opening_at_half_its_words():
    records = [{"text": "Q: two plus two is four", "prompt": "Q:"},     # 6 words: cut at 3
               {"text": "alpha beta\ngamma  delta", "prompt": ""},        # 4 words: cut at 2, whitespace kept inside
               {"text": "Question: what now", "prompt": "Question: what"},  # the opening is all but one word: cut at 2
               {"text": "Q:", "prompt": "Q:"},                             # nothing written: left out
               {"text": "", "prompt": ""}]
    assert as_items(records) == [{"prompt": "Q: two plus", "answer": "two is four"},
                                 {"prompt": "alpha beta", "answer": "gamma  delta"},
                                 {"prompt": "Question: what", "answer": "now"}]


@pytest.mark.parametrize("pool", list_names("pools"))
def test_every_expert_of_every_shipped_pool_has_labelled_items(pool, monkeypatch):
    """The pre-flight of the metrics that read data passes on every shipped pool."""
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    loaded = load_pool(pool)
    data = loaded.all_data()
    assert missing_data(data, ["gradient metrics", "activation metrics"]) == []


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return ensure_family(tmp_path_factory.mktemp("demo_cache"), seed=0, quick=True, progress=False)


def test_generated_items_are_the_experts_own_text_and_drive_the_gradient_metrics(quick, tmp_path):
    pool = yaml.safe_load(open(quick["pool_file"]))
    pool["experts"] = pool["experts"][:2]
    for e in pool["experts"]:
        e.pop("calibration", None)
        e.pop("data", None)
    pool["data"] = {"text": {"generate": SMALL}, "labelled": {"generate": SMALL}}
    path = tmp_path / "gen.yml"
    path.write_text(yaml.safe_dump(pool))
    loaded = load_pool(str(path))
    name = loaded.expert_names[0]
    model = loaded.expert(name).model
    data = loaded.data_for(name)
    texts = expert_texts(parse_data({"generate": SMALL}, "t"), name, model_path=model, generated_dir=tmp_path / "g")
    items = expert_items(data, name, model_path=model, generated_dir=tmp_path / "g")
    assert items and all(i["answer"] for i in items)
    joined = [" ".join(t.split()) for t in texts]
    assert all(" ".join(f"{i['prompt']} {i['answer']}".split()) in joined for i in items)  # the expert's own words
    out = tmp_path / "m"
    assert main(["analyze", "mergeability", "--pool", str(path), "--out", str(out), "--groups", "gradients",
                 "--n-own", "2", "--n-pooled", "2", "--max-len", "24"]) == 0
    df = pd.read_csv(out / "metrics.csv")
    grads = [c for c in df.columns if "gradient" in c]
    assert grads and df[grads].notna().all().all()
    side = json.loads((out / "metrics.json").read_text())
    assert side["forward"]["own_items"] == dict.fromkeys(loaded.expert_names, 2)
