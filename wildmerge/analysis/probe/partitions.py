"""Class-to-task partitions of a probe task's label set (the fresh-head probe paper, App. A.2-A.3).

The paper's geometry boundary (Table 2) splits one union label space into T class sets two ways:

- **Ward** (App. A.2): the classes' mean features under the frozen pretrained backbone, clustered by Ward's
  agglomerative method (each step joins the pair of clusters that least increases the within-cluster sum of
  squares) into T clusters; tasks are ordered by cluster label.
- **Random** (App. A.3): ``torch.randperm(classes)`` from a generator seeded with the partition seed (100 and 200 in
  the paper), cut into T contiguous blocks (sizes differ by at most one when T does not divide the classes).

Only classes that occur in the train split take part: a class without training items has no mean feature and no
expert could learn it.
"""

from typing import List, Sequence, Tuple

from wildmerge.errors import ConfigError
from wildmerge.families.partitions import random_partition  # shared with the demo family's partition families

DEFAULT_TASKS = 5  # T = 5 in every experiment of the paper


def parse_partitions(text: str) -> List[str]:
    """``"ward,random:100,random:200"`` -> its names, each checked; a typo is refused before any model is read."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    for name in names:
        kind, _, seed = name.partition(":")
        if name == "ward" or (kind == "random" and seed.lstrip("-").isdigit()):
            continue
        raise ConfigError(f"--partitions: {name!r} is neither 'ward' nor 'random:SEED' (e.g. ward,random:100,random:200)")
    if not names:
        raise ConfigError("--partitions needs at least one of ward, random:SEED")
    return list(dict.fromkeys(names))


def class_means(features, labels, classes: Sequence[int]):
    """(len(classes), d) float64 mean feature of each class."""
    import numpy as np

    z, y = np.asarray(features, dtype=np.float64), np.asarray(labels)
    return np.stack([z[y == c].mean(0) for c in classes])


def ward_partition(means, classes: Sequence[int], n_tasks: int) -> List[List[int]]:
    """Ward clustering of the class means into ``n_tasks`` class sets (scipy's ``linkage`` + ``fcluster``)."""
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage

    cluster = fcluster(linkage(np.asarray(means, dtype=np.float64), method="ward"), t=n_tasks, criterion="maxclust")
    return [sorted(int(classes[i]) for i in np.flatnonzero(cluster == k)) for k in sorted(set(cluster.tolist()))]


def make_partition(name: str, router_features, labels, n_tasks: int) -> Tuple[List[List[int]], str]:
    """(class sets, why not) for partition ``name`` over the classes present in ``labels`` (the train split)."""
    classes = sorted(set(int(c) for c in labels))
    if len(classes) < n_tasks:
        return [], f"{len(classes)} classes in the train split, fewer than --partition-tasks {n_tasks}"
    if name == "ward":
        return ward_partition(class_means(router_features, labels, classes), classes, n_tasks), ""
    return random_partition(classes, n_tasks, int(name.split(":", 1)[1])), ""
