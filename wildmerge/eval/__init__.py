"""Evaluation through lm-eval: suites, validation splits (``splits.py``: a task's ``validation_split`` scored as its own
column, sweeps choose on it), jobs and their fingerprints, the result store (with ``base_record`` / ``needs_run``,
shared by workers, executors and ``screening/``), the evaluation options (``EvalOptions``: one typed, once-checked
set from argparse to the executors), the long-lived lm-eval workers (prompt templates compiled once per process:
``templates.py``), the executors that run the jobs (local, serial, Ray, Slurm), the screened evaluation
(``screening/``), compositions scored through a registered model class (``composition.py``, the class in
``composition_lm.py``) and lm-eval's W&B logger (``wandb_log.py``)."""
