"""Suites inherit shared settings (``extends: NAME``): every shipped suite resolves to exactly the settings it
had when each file wrote them out, an own key wins over the inherited one, and a bad chain is one clear error."""

import pytest
import yaml

from wildmerge.errors import ConfigError
from wildmerge.eval.suites import load_suite

_COMMON = {"max_batch_size": None, "apply_chat_template": False, "backend": "hf", "device": "auto", "bootstrap_iters": 0}
_DEMO = {**_COMMON, "dtype": "float32", "batch_size": 32, "limit": None, "model_args": {}, "include_defaults": False}
_PAPER = {**_COMMON, "dtype": "float16", "batch_size": "auto", "limit": None, "model_args": {}, "include_defaults": True}
_SMOLLM2 = {**_COMMON, "dtype": "float32", "batch_size": 16, "limit": 50, "model_args": {}, "include_defaults": False}
_BF16 = {**_SMOLLM2, "dtype": "bfloat16", "batch_size": 64, "model_args": {"softmax_dtype": "float32"}}
# each shipped suite's settings as its file wrote them out in full, before suites inherited them
WRITTEN_OUT = {
    "demo": _DEMO, "demo_large": _DEMO, "demo_probe": _DEMO, "demo_val": _DEMO,
    "paper16": _PAPER, "math": _PAPER, "medical": _PAPER, "probe": {**_PAPER, "dtype": "bfloat16"},
    "smollm2": _SMOLLM2, "smollm2_large": {**_SMOLLM2, "limit": None}, "smollm2_probe": {**_SMOLLM2, "limit": None},
    "smollm2_bf16": _BF16, "smollm2_large_bf16": {**_BF16, "limit": None},
}


@pytest.mark.parametrize("name", sorted(WRITTEN_OUT))
def test_every_shipped_suite_resolves_to_the_settings_it_had(name):
    assert load_suite(name).settings.model_dump() == WRITTEN_OUT[name]


def _suite(folder, name, **keys):
    path = folder / f"{name}.yml"
    path.write_text(yaml.safe_dump({"name": name, "tasks": [{"task": "t", "num_fewshot": 0}], **keys}))
    return path


def test_own_keys_win_and_chains_are_followed(tmp_path):
    _suite(tmp_path, "root", settings={"dtype": "float16", "batch_size": 8, "limit": 5})
    _suite(tmp_path, "middle", extends="root.yml", settings={"batch_size": 4})
    leaf = _suite(tmp_path, "leaf", extends="middle.yml", settings={"limit": None})
    settings = load_suite(leaf).settings
    assert (settings.dtype, settings.batch_size, settings.limit) == ("float16", 4, None)
    assert load_suite(_suite(tmp_path, "shipped", extends="smollm2")).settings == load_suite("smollm2").settings
    assert load_suite(leaf).tasks[0].task == "t"  # tasks are the suite's own


@pytest.mark.parametrize("keys,match", [
    ({"extends": "nosuch"}, "unknown suite 'nosuch'"),
    ({"extends": 3}, "extends must name a suite"),
    ({"extends": "a.yml"}, "leads back to"),
    ({"extends": "demo", "settings": {"dtype": "float32", "bogus": 1}}, "unknown key 'bogus'"),
])
def test_a_bad_extends_is_one_clear_error(tmp_path, keys, match):
    _suite(tmp_path, "b", extends="a.yml")
    with pytest.raises(ConfigError, match=match):
        load_suite(_suite(tmp_path, "a", **keys))
