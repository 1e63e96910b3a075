"""The fresh-head probe: is the experts' knowledge still in a merge's features? Task data (``data.py``), cached
features (``features.py``), fresh heads and gap metrics (``metrics.py``), the probe over a run's models
(``probe_models.py``); over subset draws (``seeds.py``) and over families trained from different seeds or random
skill partitions, each with its own joint reference (``families.py``)."""
