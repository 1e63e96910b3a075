"""The random class-to-task partition of the fresh-head probe paper (App. A.3): a seeded ``torch.randperm`` over the
classes cut into T contiguous blocks. Shared by the probe's geometry tables (``analysis/probe/partitions.py``: the
classes are a task's labels) and the demo family's partition families (``demo/partition.py``: the classes are its
skills)."""

from typing import List, Sequence


def random_partition(classes: Sequence[int], n_tasks: int, seed: int) -> List[List[int]]:
    """The paper's random split: a seeded ``torch.randperm`` cut into ``n_tasks`` contiguous blocks (sizes differ by
    at most one when ``n_tasks`` does not divide the classes), each block sorted."""
    import torch

    perm = torch.randperm(len(classes), generator=torch.Generator().manual_seed(seed)).tolist()
    size, extra = divmod(len(classes), n_tasks)
    blocks, start = [], 0
    for t in range(n_tasks):
        end = start + size + (t < extra)
        blocks.append(sorted(int(classes[i]) for i in perm[start:end]))
        start = end
    return blocks
