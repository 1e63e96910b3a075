"""``lapack_threads`` runs CPU kernels on the thread policy's count (the policy: tests/core/test_resources.py)."""

import torch

from wildmerge import resources
from wildmerge.plugins import linalg


def test_lapack_threads_sets_and_restores_torch_threads(monkeypatch):
    monkeypatch.setenv(resources.THREADS_ENV, "1")
    before = torch.get_num_threads()
    with linalg.lapack_threads(torch.device("cpu")):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
