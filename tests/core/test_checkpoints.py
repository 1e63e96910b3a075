"""One rule for untrusted weights, shared by merging, RegMean/CoM and evaluation."""

import pytest

from wildmerge.checkpoints import weight_files
from wildmerge.errors import WildmergeError
from wildmerge.plugins.layerwise.io import Checkpoint


def test_safetensors_are_used_pickles_only_when_allowed(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(WildmergeError, match=r"only pickle weights \(pytorch_model.bin\).*--allow-pickle"):
        weight_files(tmp_path)
    assert [p.name for p in weight_files(tmp_path, allow_pickle=True)] == ["pytorch_model.bin"]
    (tmp_path / "model.safetensors").write_bytes(b"x")
    assert [p.name for p in weight_files(tmp_path, allow_pickle=True)] == ["model.safetensors"]


def test_empty_or_missing_folder_is_an_error(tmp_path):
    with pytest.raises(WildmergeError, match="no \\*.safetensors"):
        weight_files(tmp_path)
    with pytest.raises(WildmergeError, match="no \\*.safetensors"):
        weight_files(tmp_path / "absent")


def test_layerwise_reader_refuses_pickle_only_checkpoints(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(WildmergeError, match="only pickle weights"):
        Checkpoint(tmp_path)
