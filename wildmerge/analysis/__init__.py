"""What a run's models tell; figures and Markdown tables through the shared ``plotting.py`` and ``markdown.py``.

- ``report/``: the scores table, Tables 1-3, normalized accuracy, sweeps, the cost of choosing hyperparameters (grid
  against TAS: ``choice_cost.py``), plots, the norm column with its figures and the balanced / unbalanced table
  (``norms.py``), Figs. 3 / 4 / 6 across bases (``combine_plots.py``), the leaderboard page (``page_template.html``),
  the Hugging Face dataset folder (``hf_dataset.py``); ``RunData`` reads a run once.
- ``pool/``: task-vector geometry, norms (every model in one pass over the base), imbalance.
- ``mergeability/``: the 28 metrics, the predictor and its robustness studies (``study.py``).
- ``com/``: Chain of Merges' importance weights against the accuracy gap, their reference ablation, FLOPs / memory
  counted from the config.
- ``probe/``: the fresh-head probe over a run's models (``probe_models.py``), over several runs, one per subset draw
  (``seeds.py``), Ward / random class partitions (``partitions.py``), composer minus ensemble (``geometry.py``).
- ``tas/``: the task alignment score, sweeps, tuning; ``figures.py``: Figs. 9-11 and 14 from tune's outputs."""
