"""``mergekit-yaml`` merges of wildmerge's per-tensor methods, several tensors at a time on the CPU.

mergekit's executor runs the planned tasks one after another, one merge task per output tensor, so there a spectral
method's eigensolves (on one thread each: a LAPACK call on two threads stalls when a core is taken mid-call,
benchmarks/HISTORY.md) leave the other cores idle; two whole kernels side by side take about 0.6x the time of one
after the other. Once wildmerge is installed, ``mergekit.merge`` plans with ``SideBySidePlanner``: for a recipe of a
wildmerge method that merges tensors side by side (``merges_side_by_side``), it joins the merge tasks of runs of
neighbouring tensors in mergekit's schedule into one task, which runs mergekit's own merge task of each: the large
CPU matrices on the kernel pool (``kernel_pool.large_ones_side_by_side``: one BLAS thread each, as many at once as the
cores free now and free memory allow), then the rest (norms, small matrices) on the executor's thread; each tensor's
save then takes its result from it. Each tensor is still merged by mergekit's task (its checks, parameters and
dtypes) and saved by the same writer in the same order: the files are those of mergekit's plan with the kernels on
one thread (tested byte for byte).

Joined: on a CPU math device with at least two usable cores (not with ``WILDMERGE_LAPACK_THREADS=1`` or
``--num-threads 1``), runs of tensors next to each other in the schedule (a run takes in the norms between its
matrices, so the writer sees mergekit's order), each read as stored (a tensor whose vocabulary is aligned ends a run)
and with a safetensors header to read its shape from; a run holds at least two matrices of at least
``POOL_MIN_SIDE`` on each side in the base and at most ``LARGE_PER_CORE`` per usable core, and only as many
tensors as its inputs and its kernels' work fit in half of the memory free when the merge is planned (mergekit holds
one tensor's inputs at a time; a run holds all of its own). A recipe of one of mergekit's own methods gets
mergekit's plan unchanged.
"""

import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from mergekit.graph import Task
from mergekit.io.tasks import GatherTensors, LoaderCache
from mergekit.merge_methods.task_adapter import ExecuteMergeMethodTask

from wildmerge.checkpoints import shard_shapes
from wildmerge.plugins.kernel_pool import POOL_MIN_SIDE, large_ones_side_by_side
from wildmerge.resources import free_memory, usable_cores
from wildmerge.threads import threads_override

LARGE_PER_CORE = 4  # matrices per core in a run: the cores stay busy while its last kernels finish
F32_BYTES = 4  # inputs counted as float32 (mergekit converts them to the recipe's dtype)
WORK_COPIES = 4  # float64 copies of one matrix that a kernel holds (each_matrix's memory rule)

Headers = Dict[str, Dict[str, tuple]]  # safetensors file -> {tensor name: shape}, read once per merge


class MergedSideBySide(Task[Tuple[Optional[torch.Tensor], ...]]):
    """mergekit's merge tasks of a run of neighbouring tensors, the large matrices side by side; the value is
    their results in order."""

    merges: Tuple[ExecuteMergeMethodTask, ...]

    def arguments(self) -> Dict[str, Task]:
        return {f"tensors_{i}": merge.gather_tensors for i, merge in enumerate(self.merges)}

    def group_label(self) -> Optional[str]:
        return self.merges[0].group_label()  # scheduled where the first tensor's merge was

    def execute(self, **inputs) -> Tuple[Optional[torch.Tensor], ...]:
        tensors = [inputs[f"tensors_{i}"] for i in range(len(self.merges))]
        firsts = [next(iter(models.values()), None) for models in tensors]
        return tuple(large_ones_side_by_side(lambda i: self.merges[i].execute(tensors=tensors[i]), firsts))


class OneOfThem(Task[Optional[torch.Tensor]]):
    """One tensor's result from ``MergedSideBySide``: what its save (or in-memory return) reads."""

    merged: MergedSideBySide
    index: int

    def arguments(self) -> Dict[str, Task]:
        return {"merged": self.merged}

    def group_label(self) -> Optional[str]:
        return self.merged.merges[self.index].group_label()

    def execute(self, merged: Tuple[Optional[torch.Tensor], ...]) -> Optional[torch.Tensor]:
        return merged[self.index]


def side_by_side_planner(planner_class):
    """``planner_class`` (mergekit's ``MergePlanner``) with neighbouring merge tasks joined where it pays."""

    class SideBySidePlanner(planner_class):
        """mergekit's ``MergePlanner``; for a wildmerge per-tensor method on a CPU, runs of neighbouring tensors are
        merged in one task, side by side (``wildmerge.plugins.tensors_side_by_side``)."""

        def _plan(self):
            super()._plan()
            if wanted(self._method, self.options):
                self._tensors = joined(self._tensors, free_memory(), LARGE_PER_CORE * usable_cores())

    return SideBySidePlanner


def wanted(method, options) -> bool:
    """Whether this merge may join tensors: a wildmerge method that merges side by side, on a CPU with two cores."""
    one_thread = threads_override() == 1 or getattr(options, "num_threads", None) == 1
    on_cpu = str(getattr(options, "device", None) or "cpu") == "cpu" and not getattr(options, "multi_gpu", False)
    return bool(getattr(method, "merges_side_by_side", False)) and on_cpu and not one_thread and usable_cores() >= 2


def joined(tensors: List[Tuple[object, Task]], free: Optional[int], most: int) -> List[Tuple[object, Task]]:
    """The planner's ``(weight, merge task)`` list, with the tasks of each run (``runs``) replaced by their share
    of one ``MergedSideBySide``."""
    merges = [task for _, task in tensors]
    headers: Headers = {}
    sizes = [_input_elements(task, headers) for task in merges]
    order = sorted(range(len(merges)), key=lambda i: merges[i].group_label() or "")  # mergekit's schedule order
    shares = {}
    for run in runs([sizes[i] for i in order], free, most):
        members = [order[k] for k in run]
        merged = MergedSideBySide(merges=tuple(merges[i] for i in members))
        shares.update({i: OneOfThem(merged=merged, index=n) for n, i in enumerate(members)})
    return [(weight, shares.get(i, task)) for i, (weight, task) in enumerate(tensors)]


def runs(sizes: Sequence[Optional[Tuple[int, int, bool]]], free: Optional[int], most: int) -> List[List[int]]:
    """Runs of neighbours to merge in one task, left to right, from each tensor's ``(models, elements, large)`` in
    schedule order (None: a tensor that ends a run). A run starts and ends at a large matrix, has at least two and
    at most ``most`` of them, and takes in tensors while its inputs (float32) and the work of its large ones fit in
    half of ``free`` bytes (no limit when unknown)."""
    chosen, run = [], []

    def close():
        while run and not run[-1][1][2]:
            run.pop()
        if sum(1 for _, size in run if size[2]) >= 2:
            chosen.append([i for i, _ in run])
        run.clear()

    for i, size in enumerate(sizes):
        if size is None:
            close()
            continue
        full = size[2] and sum(1 for _, s in run if s[2]) >= most
        if run and (full or not _fits([s for _, s in run] + [size], free)):
            close()
        if run or size[2]:  # a run starts at a large matrix
            run.append((i, size))
    close()
    return chosen


def _fits(sizes: List[Tuple[int, int, bool]], free: Optional[int]) -> bool:
    inputs = sum(F32_BYTES * models * elements for models, elements, _ in sizes)
    work = sum(WORK_COPIES * 8 * elements for _, elements, large in sizes if large)
    return free is None or inputs + work <= free // 2


def _input_elements(task: Task, headers: Headers) -> Optional[Tuple[int, int, bool]]:
    """``(models, elements per model, large)`` of a merge task that may join a run, else None: mergekit's merge task
    over tensors gathered as stored, with its base's (or first model's) shape known; large: a matrix of at least
    ``POOL_MIN_SIDE`` on each side."""
    if not isinstance(task, ExecuteMergeMethodTask) or type(task.gather_tensors) is not GatherTensors:
        return None
    weights = task.gather_tensors.weight_info
    model = task.base_model if task.base_model in weights else next(iter(weights), None)
    if model is None:
        return None
    shape = _stored_shape(model, weights[model], headers)
    if shape is None:
        return None
    return len(weights), math.prod(shape), len(shape) == 2 and min(shape) >= POOL_MIN_SIDE


def _stored_shape(model, weight, headers: Headers) -> Optional[tuple]:
    """The shape of ``weight`` in ``model``'s safetensors files (by mergekit's name or aliases), None if unknown."""
    index = LoaderCache().get(model).index
    if not index.is_safetensors:
        return None
    for name in [weight.name, *(weight.aliases or ()), *(weight.tied_names or ())]:
        if name in index.tensor_paths:
            shard = str(Path(index.base_path) / index.tensor_paths[name])
            if shard not in headers:
                headers[shard] = shard_shapes(shard)
            return headers[shard].get(name)
    return None
