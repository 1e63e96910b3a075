"""Mergeability (Zhou et al., "Demystifying Mergeability", arXiv 2601.22285): 28 pairwise metrics computed without
merging, post-merge targets, the sparse Pearson predictor, and subset selection from it.

Everything expensive is per model and cached (``cache.py``); pairwise values are cheap reductions (``pairwise.py``).
"""
