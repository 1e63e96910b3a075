"""Task-vector norms of many models in one pass over the base: the same numbers as one model at a time, the base
read once, a broken model failing alone."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from wildmerge.analysis.pool import norms
from wildmerge.errors import WildmergeError


def norm64(model_dir, base_dir) -> float:
    """||theta - theta_base||_2 over every tensor, in float64 with numpy (the definition, not the streaming code)."""
    from safetensors.numpy import load_file

    a = {k: v for f in sorted(Path(model_dir).glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    b = {k: v for f in sorted(Path(base_dir).glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    assert set(a) == set(b)
    return float(np.sqrt(sum(np.sum((a[k].astype(np.float64) - b[k].astype(np.float64)) ** 2) for k in a)))


def test_one_pass_equals_each_model_alone_bit_for_bit(tiny_family):
    base, experts = tiny_family["base"], tiny_family["experts"]
    dirs = {f"e{i}": path for i, path in enumerate(experts)} | {"base": base}
    together = norms.task_vector_norms(dirs, base)
    assert list(together) == list(dirs)
    assert together["base"] == 0.0
    for key, path in dirs.items():
        assert together[key] == norms.task_vector_norm(path, base)  # same blocks, same order: the same float
        assert together[key] == pytest.approx(norm64(path, base), rel=1e-12, abs=0)
    assert len({together[f"e{i}"] for i in range(3)}) == 3  # three different experts, three different norms


def test_groups_and_row_blocks_add_up_to_the_definition(tiny_family, monkeypatch):
    base, experts = tiny_family["base"], tiny_family["experts"]
    monkeypatch.setattr(norms, "GROUP", 2)  # three models: two passes over the base
    monkeypatch.setattr(norms, "BLOCK", 7)  # every matrix in many row blocks
    found = norms.task_vector_norms({i: p for i, p in enumerate(experts)}, base)
    for i, path in enumerate(experts):
        assert found[i] == pytest.approx(norm64(path, base), rel=1e-12)


def test_a_pass_maps_at_most_group_bytes_of_checkpoints(tiny_family, monkeypatch):
    """Large checkpoints go in smaller groups (their mapped pages stay resident while the pass runs), with the same
    norms as one group."""
    from wildmerge.checkpoints import weights_bytes

    base, experts = tiny_family["base"], tiny_family["experts"]
    size = weights_bytes(experts[0])
    assert norms.group_size(experts) == norms.GROUP  # tiny models: one pass
    monkeypatch.setattr(norms, "GROUP_BYTES", 2 * size)
    assert norms.group_size(experts) == 2
    monkeypatch.setattr(norms, "GROUP_BYTES", size // 2)
    assert norms.group_size(experts) == 1  # never fewer than one
    passes = []
    real = norms._one_pass
    monkeypatch.setattr(norms, "_one_pass", lambda group, *a: (passes.append(len(group)), real(group, *a)))
    found = norms.task_vector_norms({i: p for i, p in enumerate(experts)}, base)
    assert passes == [1] * len(experts)
    for i, path in enumerate(experts):
        assert found[i] == pytest.approx(norm64(path, base), rel=1e-12)


def test_each_base_tensor_is_read_once_per_pass(tiny_family, monkeypatch):
    import safetensors

    base, experts = tiny_family["base"], tiny_family["experts"]
    reads = []  # (folder, tensor) of every slice or tensor read
    real = safetensors.safe_open

    class Counting:
        def __init__(self, path, *args, **kwargs):
            self.folder, self.inner = Path(path).parent, real(path, *args, **kwargs)

        def __enter__(self):
            self.inner.__enter__()
            return self

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

        def get_slice(self, name):
            reads.append((self.folder, name))
            return self.inner.get_slice(name)

        def get_tensor(self, name):
            reads.append((self.folder, name))
            return self.inner.get_tensor(name)

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

    monkeypatch.setattr(safetensors, "safe_open", Counting)
    names = sorted(norms.tensor_index(base))
    norms.task_vector_norms({i: p for i, p in enumerate(experts)}, base)
    for folder in [base, *experts]:
        assert sorted(n for f, n in reads if f == Path(folder)) == names  # every tensor once, the base's too


def test_a_broken_model_fails_alone(tiny_family, tmp_path):
    base, experts = tiny_family["base"], tiny_family["experts"]
    other = tmp_path / "other"  # same folder layout, one tensor renamed
    shutil.copytree(experts[0], other)
    from safetensors.torch import load_file, save_file

    weights = load_file(str(other / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name + "_renamed"] = weights.pop(name)
    save_file(weights, str(other / "model.safetensors"))
    found = norms.task_vector_norms({"bad": other, "missing": tmp_path / "nothing", "good": experts[1]}, base)
    assert isinstance(found["bad"], WildmergeError) and "different tensors" in str(found["bad"])
    assert isinstance(found["missing"], (WildmergeError, OSError))
    assert found["good"] == norms.task_vector_norm(experts[1], base)
    with pytest.raises(WildmergeError, match="different tensors"):
        norms.task_vector_norm(other, base)


def test_cache_computes_only_what_it_lacks(tiny_family, tmp_path, monkeypatch):
    base, experts = tiny_family["base"], tiny_family["experts"]
    cache = norms.NormCache(tmp_path / "norms.json")
    first = cache.norms({"a": experts[0]}, base)
    cache.save()
    expected_b = norms.task_vector_norm(experts[1], base)
    asked = []
    real = norms.task_vector_norms
    monkeypatch.setattr(norms, "task_vector_norms", lambda dirs, b: asked.append(list(dirs)) or real(dirs, b))
    again = norms.NormCache(tmp_path / "norms.json").norms({"a": experts[0], "b": experts[1]}, base)
    assert again["a"] == first["a"] and again["b"] == expected_b
    assert asked == [[norms.NormCache.key(experts[1], base)]]  # the cached one was not read again
