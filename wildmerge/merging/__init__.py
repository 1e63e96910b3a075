"""Turning a plan into merged models: the resumable runner through mergekit; merge workers (``workers.py``: one per GPU,
or CPU shares, on a CPU at most the usable cores and what free memory holds at a measured per-process cost); the
tokenizer plan for experts with other vocabularies; model cards; and the in-memory merger behind sweeps and the
search (``inmemory.py``: every tensor in one call, so wildmerge's methods merge the large CPU matrices side by
side)."""
