"""Screened evaluation (``--screen FRACTION``): every model scored on a fixed subset of items first, finished only
where the comparison needs it."""
