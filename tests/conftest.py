"""Shared fixtures: tiny real transformers checkpoints on disk, built from a config (no hub)."""

import os

import pytest

from helpers import make_tiny_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# dry runs plan at the built-in CPU rates (their planned seconds are checked by hand) and never fill the user's
# ~/.cache with this host's measured ones; tests/planning/test_host_rates.py turns the measurement on, in a folder of its own
os.environ.setdefault("WILDMERGE_HOST_RATES", "defaults")


@pytest.fixture(scope="session", autouse=True)
def _own_data_cache(tmp_path_factory):
    """The suite's expert-data cache is its own (a test never reads or fills the user's ~/.cache)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WILDMERGE_DATA_CACHE", str(tmp_path_factory.mktemp("expert_data_cache")))
        yield


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory):
    """A tiny Llama base and three noisy experts of it: {'base': path, 'experts': [paths]}."""
    root = tmp_path_factory.mktemp("tiny_llama")
    base = make_tiny_model(root / "base", "llama", seed=0)
    experts = [make_tiny_model(root / f"expert{i}", base=base, seed=i + 1, noise=0.02) for i in range(3)]
    return {"base": base, "experts": experts}


@pytest.fixture(scope="session")
def tiny_qwen3_family(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_qwen3")
    base = make_tiny_model(root / "base", "qwen3", seed=0)
    experts = [make_tiny_model(root / f"expert{i}", base=base, seed=i + 1, noise=0.02) for i in range(3)]
    return {"base": base, "experts": experts}
