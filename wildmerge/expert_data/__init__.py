"""Each expert's own data (calibration text, labelled items): one contract for every feature that reads it.

``schema.py``: a pool expert's ``data:`` (alias ``calibration:``), an unlabelled ``text`` part and an optional
``labelled`` part, each one source (local jsonl / json / txt / parquet, a hub dataset at the entry's ``revision:``,
``lm_eval_task`` train split, ``generate``, a ``demo:`` reference), a pool-level default inherited part by part.
``read.py``: the one reader (texts, prompt / answer items, how many texts an expert has). ``cache.py``: content-keyed.
``count.py``: how many texts each expert has against how many a data method reads (one line when too few).
``check.py``: every source checked at pool load (``missing_data`` for dry runs and pre-flights). ``recipe.py``: the
manifest and mergekit-recipe forms. ``generate.py``: text sampled from the expert itself."""
