"""What a run's models tell; figures and Markdown tables through the shared ``plotting.py`` and ``markdown.py``.

- ``report/``: the scores table, Tables 1-3, normalized accuracy, sweeps, the cost of choosing hyperparameters (grid
  against TAS, and the reality-check paper's Fig. 2: ``choice_cost.py``), the choices across runs (``choices.py``),
  the data-based merges' FLOPs / memory / seconds (``merge_compute.py``, CoM's Fig. 5), plots, the norm column with
  its figures and the balanced / unbalanced table and figure (``norms.py``, Fig. 6), Figs. 3 / 4 / 6 across bases
  (``combine_plots.py``), the leaderboard page (``page_template.html``), the Hugging Face dataset folder
  (``hf_dataset.py``); ``RunData`` reads a run once.
- ``pool/``: task-vector geometry, norms (every model in one pass over the base), imbalance.
- ``mergeability/``: the 28 metrics (timed per category: the mergeability paper's Table 10), the predictor and its
  robustness studies (``study.py``); ``pool_metrics.py`` runs them on a pool.
- ``com/``: Chain of Merges' importance weights against the accuracy gap, their reference ablation.
- ``flops.py``: every data-based method's FLOPs and memory counted from the config.
- ``probe/``: the fresh-head probe over a run's models (``probe_models.py``, run as a job by ``job.py``), over
  several runs, one per subset draw (``seeds.py``), Ward / random class partitions (``partitions.py``), composer
  minus ensemble (``geometry.py``), over families trained from different seeds, each with its own joint reference
  (``families.py``: Tables 5 and 6).
- ``tas/``: the task alignment score, sweeps, tuning; ``check.py``: ``tune --check``, TAS and AdaMMS* against
  accuracy; ``figures.py``: Figs. 9-11 and 14 from tune's outputs."""
