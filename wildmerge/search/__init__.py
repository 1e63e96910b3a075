"""A guided search for a good merge under a budget of evaluations (``wildmerge search``)."""
