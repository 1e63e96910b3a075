"""Evaluation through lm-eval: suites, validation splits, jobs and their fingerprints, the result store, the workers
and executors that run the jobs (local, Ray, Slurm), and the screened evaluation (``screening/``)."""
