"""Planning: what a run merges, as data. The pool, the in-the-wild subsets (``sampler.py``), the plan (subsets x
methods x hyperparameters), the manifest, and the checks before anything is merged (dry run, pre-flight). The dry
run's cost plan (``cost.py``: a run and merge starts plus TA's rate x each method's factor per device plus data
passes; ``host_rates.py``: the CPU rates measured once on this host and cached); calibration-sample sweeps capped by
the experts' texts (``sample_cap.py``)."""
