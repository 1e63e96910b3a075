"""The run's report (``RUN/report/``): the scores table, the paper's Tables 1-3, sweeps, costs, figures and the
self-contained leaderboard page, all read from the run folder once (``run_data.py``)."""
