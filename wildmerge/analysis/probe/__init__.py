"""The fresh-head probe: is the experts' knowledge still in a merge's features? Task data (``data.py``), cached
features (``features.py``), fresh heads and gap metrics (``metrics.py``), the probe over a run's models
(``probe_models.py``)."""
