"""A guided search for a good merge under a budget of evaluations (``wildmerge search``).

``bandit.py``: every expert screened at the first rung, then Thompson sampling on each method x size arm's next
member (every method once first, one draw per untried expert on its own score), successive halving inside
(``halving.py``); ``live.py`` merges in memory (RegMean / CoM through the mergekit runner) and scores with lm-eval; the
benchmark replays recorded items through the same function; ``plan.py``: what a search will cost, priced by the
protocol's cost plan (``planning/cost.py``); ``defaults.py``: the methods it tries when none are given (RegMean and CoM
beside TA and TIES where every expert has data), written once."""
