"""What a run's models tell: the report (``report/``), a pool's task-vector diagnostics (``pool/``), mergeability
(``mergeability/``), Chain of Merges' importance weights (``com/``), the fresh-head probe (``probe/``) and the task alignment score (``tas/``); figures and Markdown
tables through the shared ``plotting.py`` and ``markdown.py``."""
