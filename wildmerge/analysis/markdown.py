"""Markdown tables through pandas' ``to_markdown`` (tabulate's pipe format), from cells formatted by the caller."""

from typing import Iterable, List, Optional, Sequence


def markdown_table(rows: Iterable[Sequence], columns: List[str], align: Optional[List[str]] = None) -> str:
    """A GitHub Markdown table; cells are shown as given (``str``; None is empty), never re-parsed as numbers.
    ``align``: "left" / "right" / "center" per column (default left)."""
    import pandas as pd

    cells = [["" if v is None else str(v) for v in row] for row in rows]
    frame = pd.DataFrame(cells, columns=columns, dtype=object)
    return frame.to_markdown(index=False, disable_numparse=True, colalign=align) + "\n"
