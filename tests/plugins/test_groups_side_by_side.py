"""Several tensors in one call (mergekit's ``merge_state_dicts``, wildmerge's in-memory merger): wildmerge's methods
merge the large CPU matrices side by side on the kernel pool, and every result is the one a call per tensor gives."""

import threading

import mergekit.merge_methods as merge_methods
import pytest
import torch
from mergekit.merge_methods import merge_state_dicts
from mergekit.merge_methods.base import TensorGroup

from wildmerge.errors import ConfigError
from wildmerge.merging.inmemory import CandidateMerger
from wildmerge.plugins import methods
from wildmerge.plugins.task_vector_method import TaskVectorMethod
from wildmerge.resources import usable_cores

needs_two_cores = pytest.mark.skipif(usable_cores() < 2, reason="side by side needs two usable cores")

# large enough for the pool (POOL_MIN_SIDE = 128), in both orientations, with a small matrix and a vector between
SHAPES = {"a.weight": (160, 130), "norm.weight": (130,), "b.weight": (130, 200), "tiny.weight": (8, 6),
          "c.weight": (144, 144)}
CASES = [("iso_c", {}), ("iso_cts", {}), ("tsv_m", {}), ("task_arithmetic_sb", {"weight": 1.0, "beta": 0.3}),
         ("ties_sb", {"weight": 1.0, "density": 0.5, "beta": 0.3}), ("consensus_ta", {}), ("star", {})]


def state_dicts(n_experts=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = {name: torch.randn(*shape, generator=g) for name, shape in SHAPES.items()}
    experts = {f"e{i}": {name: t + 0.05 * torch.randn(*t.shape, generator=g) for name, t in base.items()}
               for i in range(n_experts)}
    return {"base": base, **experts}


def merged_on(monkeypatch, method, parameters, models, threads: str):
    """Every tensor in one call with ``WILDMERGE_LAPACK_THREADS=threads``; the thread each tensor was merged on."""
    monkeypatch.setenv("WILDMERGE_LAPACK_THREADS", threads)
    where = {}
    one_group = type(method).merge_group

    def recording(self, group: TensorGroup, /, **kwargs):
        where[group.metadata.name] = threading.current_thread().name
        return one_group(self, group, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(type(method), "merge_group", recording)
        with torch.no_grad():
            out = merge_state_dicts(models, method, parameters=parameters, base="base")
    return out, where


@needs_two_cores
@pytest.mark.parametrize("name,parameters", CASES)
def test_tensors_side_by_side_give_the_bytes_of_one_call_each(monkeypatch, name, parameters):
    method = merge_methods.get(name)
    models = state_dicts()
    together, where = merged_on(monkeypatch, method, parameters, models, "2")
    monkeypatch.setenv("WILDMERGE_LAPACK_THREADS", "1")  # one call per tensor on one thread: the reference bytes
    for tensor in SHAPES:
        alone = merge_state_dicts({k: {tensor: v[tensor]} for k, v in models.items()}, method,
                                  parameters=parameters, base="base")[tensor]
        assert torch.equal(together[tensor], alone), (name, tensor)
    pooled = {t for t, thread in where.items() if thread.startswith("wildmerge-kernel")}
    assert pooled == {"a.weight", "b.weight", "c.weight"}, where  # the small ones stay on the caller's thread
    assert where["norm.weight"] == where["tiny.weight"] == threading.current_thread().name


def test_one_thread_merges_them_one_after_another_on_the_callers_thread(monkeypatch):
    method = methods.ISO_C
    _, where = merged_on(monkeypatch, method, {}, state_dicts(), "1")
    assert set(where.values()) == {threading.current_thread().name}


@needs_two_cores
@pytest.mark.parametrize("grad", [False, True])
def test_grad_mode_is_the_callers_in_the_pool(monkeypatch, grad):
    """torch's grad mode is per thread: a merge under ``no_grad`` records no graph in the pool's threads either."""
    monkeypatch.setenv("WILDMERGE_LAPACK_THREADS", "2")
    seen = {}
    one_group = methods.SpectralMerge.merge_group

    def recording(self, group, /, **kwargs):
        seen[group.metadata.name] = (threading.current_thread().name, torch.is_grad_enabled())
        return one_group(self, group, **kwargs)

    monkeypatch.setattr(methods.SpectralMerge, "merge_group", recording)
    with torch.set_grad_enabled(grad):
        merge_state_dicts(state_dicts(), methods.ISO_C, base="base")
    assert seen["a.weight"][0].startswith("wildmerge-kernel")
    assert {mode for _, mode in seen.values()} == {grad}


@needs_two_cores
def test_a_bad_tensor_in_the_pool_is_named(monkeypatch):
    monkeypatch.setenv("WILDMERGE_LAPACK_THREADS", "2")
    models = state_dicts()
    models["e1"]["b.weight"][3, 4] = float("nan")
    with pytest.raises(ConfigError, match=r"'b.weight' of model e1 contains NaN"):
        merge_state_dicts(models, methods.ISO_C, base="base")


def test_every_wildmerge_method_on_task_vectors_merges_groups_side_by_side():
    """The per-tensor methods built on the template (and the boosted TA / TIES) all take the side-by-side path."""
    for name in ("iso_c", "iso_cts", "tsv_m", "task_arithmetic_sb", "ties_sb", "consensus_ta", "star", "tsv_lossless",
                 "knots_ties", "localize_stitch", "lines_ta", "norm_avg"):
        method = merge_methods.get(name)
        assert isinstance(method, (TaskVectorMethod, methods.BoostedTaskArithmetic)), name


def test_the_in_memory_merger_hands_every_tensor_over_in_one_call(tiny_qwen3_family, monkeypatch):
    calls = []
    execute = TaskVectorMethod._execute

    def counting(self, groups, *args, **kwargs):
        calls.append(len(groups))
        return execute(self, groups, *args, **kwargs)

    monkeypatch.setattr(TaskVectorMethod, "_execute", counting)
    names = ["e0", "e1", "e2"]
    merger = CandidateMerger(tiny_qwen3_family["base"], dict(zip(names, tiny_qwen3_family["experts"])))
    out = merger.merge({"merge_method": "iso_c", "base_model": tiny_qwen3_family["base"],
                        "models": [{"model": e} for e in names]})
    assert calls == [len(merger.base)] and list(out) == list(merger.base)
