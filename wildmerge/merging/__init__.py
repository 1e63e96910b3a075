"""Turning a plan into merged models: the resumable runner through mergekit, one worker per GPU or CPU share, the
tokenizer plan for experts with other vocabularies, model cards, and in-memory merges for sweeps."""
