"""``mergekit-yaml`` with wildmerge's methods merges neighbouring CPU matrices side by side (``SideBySidePlanner``):
the files are byte for byte those of mergekit's plan on one thread, the right tensors are joined, mergekit's own
methods keep mergekit's plan, and bad input is still named."""

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import mergekit.merge
import pytest
import yaml
from mergekit.architecture import get_architecture_info
from mergekit.config import MergeConfiguration
from mergekit.io.tasks import LoaderCache
from mergekit.options import MergeOptions
from safetensors.torch import load_file, save_file

from helpers import make_tiny_model
from wildmerge.errors import ConfigError
from wildmerge.plugins import methods
from wildmerge.plugins.task_vector_method import TaskVectorMethod
from wildmerge.plugins.tensors_side_by_side import MergedSideBySide, runs
from wildmerge.resources import usable_cores

needs_two_cores = pytest.mark.skipif(usable_cores() < 2, reason="side by side needs two usable cores")

# hidden 128: q, o, gate, up, down are >= POOL_MIN_SIDE on both sides; k, v (64 x 128), the 64-token vocabulary
# matrices and the norms are not. mergekit's schedule goes by tensor name: per layer input_layernorm, down, gate, up,
# post_attention_layernorm, k, o, q, v, so the runs are (down, gate, up) and (o, q).
JOINED = {f"model.layers.{i}.{name}.weight" for i in range(2)
          for name in ("mlp.down_proj", "mlp.gate_proj", "mlp.up_proj", "self_attn.o_proj", "self_attn.q_proj")}
RECIPES = {"iso_c": {}, "task_arithmetic_sb": {"weight": 1.0, "beta": 0.5}, "tsv_m": {}}


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    root = tmp_path_factory.mktemp("side_by_side_llama")
    base = make_tiny_model(root / "base", "llama", seed=0, hidden=128)
    experts = [make_tiny_model(root / f"e{i}", base=base, seed=i + 1, noise=0.02) for i in range(3)]
    return {"base": base, "experts": experts}


def recipe(family, method, experts=None):
    return {"merge_method": method, "base_model": family["base"], "dtype": "float32",
            "parameters": RECIPES.get(method, {}), "models": [{"model": e} for e in experts or family["experts"]]}


def mergekit_yaml(config: dict, folder: Path, threads: str) -> Path:
    """The stock CLI, with the kernels' threads set by ``WILDMERGE_LAPACK_THREADS``; small shards, so the files'
    layout shows the writer's order."""
    folder.mkdir()
    (folder / "recipe.yml").write_text(yaml.safe_dump(config))
    out = folder / "out"
    exe = Path(sys.executable).with_name("mergekit-yaml")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WILDMERGE_LAPACK_THREADS=threads)
    proc = subprocess.run([str(exe), str(folder / "recipe.yml"), str(out), "--out-shard-size", "300K", "--quiet"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@needs_two_cores
@pytest.mark.parametrize("method", sorted(RECIPES))
def test_mergekit_yaml_writes_the_files_of_mergekits_plan_on_one_thread(family, tmp_path, method):
    """Two kernels side by side (one BLAS thread each) against mergekit's plan, one tensor at a time on one thread
    (``WILDMERGE_LAPACK_THREADS=1`` keeps mergekit's plan): every weight file and the shard index, byte for byte."""
    joined = mergekit_yaml(recipe(family, method), tmp_path / "joined", "2")
    alone = mergekit_yaml(recipe(family, method), tmp_path / "alone", "1")
    files = sorted(p.name for p in alone.glob("model*"))
    assert len(files) > 2  # several shards and their index
    assert files == sorted(p.name for p in joined.glob("model*"))
    for name in files:
        assert (joined / name).read_bytes() == (alone / name).read_bytes(), name


def merged_in_process(config, out, monkeypatch, threads="2"):
    """run_merge in this process; the thread each tensor was merged on."""
    monkeypatch.setenv("WILDMERGE_LAPACK_THREADS", threads)
    where = {}
    for cls in (TaskVectorMethod, methods.BoostedTaskArithmetic):
        def recording(self, group, /, _merge_group=cls.merge_group, **kwargs):
            where[group.metadata.name] = threading.current_thread().name
            return _merge_group(self, group, **kwargs)
        monkeypatch.setattr(cls, "merge_group", recording)
    mergekit.merge.run_merge(MergeConfiguration.model_validate(config), str(out),
                             options=MergeOptions(copy_tokenizer=False, quiet=True))
    return where


@needs_two_cores
@pytest.mark.parametrize("method", ["iso_c", "task_arithmetic_sb"])
def test_the_large_neighbours_are_merged_in_the_pool_the_rest_on_the_main_thread(family, tmp_path, monkeypatch,
                                                                                  method):
    where = merged_in_process(recipe(family, method), tmp_path / "out", monkeypatch)
    pooled = {name for name, thread in where.items() if thread.startswith("wildmerge-kernel")}
    assert pooled == JOINED
    assert {where[name] for name in set(where) - JOINED} == {threading.current_thread().name}
    assert len(where) == 21  # every tensor of the model merged once


def planned_runs(config, **options):
    """The tensors of each ``MergedSideBySide`` in the plan ``run_merge`` would execute."""
    cfg = MergeConfiguration.model_validate(config)
    opts = MergeOptions(copy_tokenizer=False, quiet=True, **options)
    arch = get_architecture_info(cfg, opts)
    LoaderCache().setup(options=opts)
    planner = mergekit.merge.MergePlanner(cfg, arch, options=opts,
                                          out_model_config=mergekit.merge._model_out_config(cfg, arch))
    seen, found, todo = set(), [], list(planner.plan_to_disk("unused"))
    while todo:
        task = todo.pop()
        if id(task) in seen:
            continue
        seen.add(id(task))
        if isinstance(task, MergedSideBySide):
            found.append(tuple(m.output_weight.name for m in task.merges))
        todo.extend(task.arguments().values())
    return sorted(found)


@needs_two_cores
def test_the_plan_joins_runs_of_neighbours_from_a_large_matrix_to_a_large_matrix(family, monkeypatch):
    monkeypatch.setenv("WILDMERGE_LAPACK_THREADS", "2")
    found = planned_runs(recipe(family, "iso_c"))
    names = sorted(load_file(str(Path(family["base"]) / "model.safetensors")))  # mergekit's schedule order
    assert {name for run in found for name in run} >= JOINED
    for run in found:
        start = names.index(run[0])
        assert list(run) == names[start:start + len(run)]  # neighbours, norms and small matrices between included
        assert run[0] in JOINED and run[-1] in JOINED and len(set(run) & JOINED) >= 2
    if usable_cores() == 2:  # at most LARGE_PER_CORE x 2 = 8 large matrices a run
        layer = "model.layers.{}.{}.weight".format
        assert found == [tuple(names[names.index(layer(0, "mlp.down_proj")):names.index(layer(1, "mlp.up_proj")) + 1]),
                         (layer(1, "self_attn.o_proj"), layer(1, "self_attn.q_proj"))]


@pytest.mark.parametrize("method,threads,options", [("task_arithmetic", "2", {}), ("ties", "2", {}),
                                                     ("iso_c", "1", {}), ("iso_c", "2", {"num_threads": 1})])
def test_mergekits_methods_and_one_thread_keep_mergekits_plan(family, monkeypatch, method, threads, options):
    monkeypatch.setenv("WILDMERGE_LAPACK_THREADS", threads)
    config = recipe(family, method)
    config["parameters"] = {"weight": 1.0, **({"density": 0.5} if method == "ties" else {})}
    assert planned_runs(config, **options) == []


def test_mergekit_without_the_hook_plans_with_its_own_planner():
    code = "import mergekit.merge as m; print(m.MergePlanner.__name__, m.MergePlanner.__module__)"
    run = lambda **env: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       env=dict(os.environ, **env)).stdout.split()
    assert run() == ["SideBySidePlanner", "wildmerge.plugins.tensors_side_by_side"]
    assert run(WILDMERGE_AUTOLOAD="0") == ["MergePlanner", "mergekit.plan"]


@needs_two_cores
def test_a_nan_in_a_joined_tensor_is_named_with_its_model(family, tmp_path, monkeypatch):
    key = "model.layers.1.mlp.gate_proj.weight"  # the middle of a run
    bad = tmp_path / "poisoned"
    shutil.copytree(family["experts"][1], bad)
    weights = load_file(str(bad / "model.safetensors"))
    weights[key][3, 5] = float("nan")
    save_file(weights, str(bad / "model.safetensors"), metadata={"format": "pt"})
    config = recipe(family, "iso_c", [family["experts"][0], str(bad)])
    with pytest.raises(ConfigError, match=rf"{key}.*poisoned.*NaN or Inf"):
        merged_in_process(config, tmp_path / "out", monkeypatch)


# ---------------------------------------------------------------- the rule, on sizes


def test_runs_go_from_a_large_matrix_to_a_large_matrix_and_hold_at_most_most():
    big, small = (13, 1000, True), (13, 10, False)
    assert runs([small, big, small, big, big, small, None, big, big], None, most=4) == [[1, 2, 3, 4], [7, 8]]
    assert runs([big, big, big, big, big], None, most=2) == [[0, 1], [2, 3]]  # the fifth is alone: no run
    assert runs([big, None, big, small, small], None, most=4) == []  # a run has two large matrices at least
    assert runs([], None, most=4) == [] and runs([big], None, most=4) == []


def test_runs_hold_their_inputs_and_work_in_half_of_free_memory():
    big = (13, 1000, True)  # 52 000 bytes of float32 inputs and 32 000 of float64 work each
    assert runs([big, big, big], free=2 * 2 * 84_000, most=4) == [[0, 1]]  # two fit in half, three do not
    assert runs([big, big, big], free=2 * 84_000, most=4) == []  # one alone fits: mergekit holds that much anyway
