"""One rule for untrusted weights, shared by merging, RegMean/CoM and evaluation."""

import pytest
import torch

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_all_finite_is_the_elementwise_rule(dtype):
    """The summing shortcut answers as ``isfinite(t).all()`` on every case: finite, one NaN, +Inf, -Inf, Inf and
    -Inf together (their sum is NaN), finite values whose sum overflows, empty."""
    from wildmerge.checkpoints import all_finite

    big = torch.finfo(dtype).max
    cases = [torch.randn(37, 5).to(dtype), torch.full((1000,), big, dtype=dtype), torch.empty(0, dtype=dtype),
             torch.tensor([big, -big], dtype=dtype)]
    for value in (float("nan"), float("inf"), float("-inf")):
        t = torch.randn(37, 5).to(dtype)
        t[7, 3] = value
        cases.append(t)
    both = torch.zeros(10, dtype=dtype)
    both[2], both[8] = float("inf"), float("-inf")
    cases.append(both)
    for t in cases:
        assert all_finite(t) == bool(torch.isfinite(t).all()), t


def test_nonfinite_in_file_names_exactly_the_damaged_tensors(tmp_path):
    from safetensors.torch import save_file

    from wildmerge.checkpoints import nonfinite_in_file

    huge = torch.full((64,), 3e38)  # finite, but its float32 sum overflows: the element-wise check decides
    bad = torch.ones(3, 3)
    bad[1, 1] = float("nan")
    save_file({"a": torch.ones(4), "huge": huge, "bad": bad, "ids": torch.arange(4)}, str(tmp_path / "m.safetensors"))
    assert nonfinite_in_file(tmp_path / "m.safetensors") == ["bad"]
