"""Diagnostics of a pool's task vectors before and around merging: geometry, norms and their imbalance, TIES's sign
election, norm-balanced subsets, and how close a merge stays to each expert as lambda grows."""
