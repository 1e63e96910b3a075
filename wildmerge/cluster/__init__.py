"""The protocol's merged models as cluster jobs: each model merged, scored and (``--keep-models none``) pruned in
one Ray task or Slurm array task on the node the engine gives it (``model_job.py``), submitted, retried and split
between drivers by ``driver.py``. Above ``merging/`` and ``eval/``, which do not know each other.

The run folder is shared storage: every node sees it, the pool's models, their data and the embedded families'
cache at the same paths as the submitting machine (a cluster's shared home or project file system)."""
