"""Which merge methods ``wildmerge search`` tries when ``--methods`` is left out: the one place they are written.

The evidence (docs/results.md, the SmolLM2 family's whole protocol): the best merge was Chain of Merges with each
expert's own data, RegMean second, the nine best models all RegMean or CoM merges. So where every expert of the pool
has the text those two read (``expert_data``: a file, a dataset, an lm-eval task, a family's own, or ``generate``),
they join TA and TIES; where some expert has none, the arms stay TA and TIES and the search says why in one line.

Each arm is its method's tuned variant where this code base can tune it: TAS picks TA's and TIES' settings on the
whole pool (``analysis/tas/tune.py``'s grids; ``--no-tune`` keeps the recipes'). RegMean and CoM have no TAS grid
(a TAS sweep merges in memory, which a layer-wise method cannot: ``merging.inmemory`` refuses it), so they run at
their recipes' settings, the settings the SmolLM2 protocol measured.
"""

from typing import List, Optional, Tuple

WITHOUT_DATA = ("ta", "ties")  # per tensor: no expert's data needed
DATA_METHODS = ("regmean", "com")  # each expert's own text, layer by layer
WITH_DATA = WITHOUT_DATA + DATA_METHODS


def default_methods(pool) -> Tuple[List[str], Optional[str]]:
    """(the pool's default arms, None) where every expert has data, else (TA and TIES, the one line saying why the
    data methods are left out and how to add data). Decided from the pool file alone: no model or data is read."""
    from wildmerge.expert_data.check import NEEDS, has
    from wildmerge.recipes.method import load_methods

    needs = {r.recipe["merge_method"] for r in load_methods(DATA_METHODS).values()}
    lacking = [name for name, data in pool.all_data().items()
               if not all(has(data, NEEDS[m]) for m in needs)]
    if not lacking:
        return list(WITH_DATA), None
    who = ", ".join(lacking[:3]) + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else "")
    return list(WITHOUT_DATA), (
        f"note: default arms {', '.join(WITHOUT_DATA)}: {' and '.join(DATA_METHODS)} (the SmolLM2 protocol's best) "
        f"need each expert's own text, and there is none for {who}; add {_line()} to "
        f"{pool.source or 'the pool file'} (per expert, or once at its top level), or give --methods")


def _line() -> str:
    """``data: generate`` and its alternatives, as the pre-flight's missing-data message says them."""
    from wildmerge.expert_data.check import line_to_add

    code, _, why = line_to_add("text").partition("  ")
    return f"`{code}` {why}"


def methods_for(pool, methods=None, count: bool = False) -> List[str]:
    """``methods`` as given (``--methods``), else the pool's default arms, printing the line that says why the data
    methods are left out where they are. ``count``: also count each expert's texts (``expert_data``: read, or the
    number ``generate`` will sample) and leave the data methods out where an expert has fewer than they read; the
    live search counts, a dry run (offline, reading the pool file only) does not."""
    from wildmerge.recipes.method import load_methods

    if methods is not None:
        return list(methods)
    methods, note = default_methods(pool)
    short = short_of_texts(pool, load_methods(DATA_METHODS)) if count and note is None else None
    if short:
        methods, note = list(WITHOUT_DATA), (
            f"note: default arms {', '.join(WITHOUT_DATA)}: {short}; give every expert at least that many texts in "
            f"{pool.source or 'the pool file'} (`data: generate` samples 64 of each), or give --methods")
    if note:
        print(note)
    return methods


def short_of_texts(pool, recipes: dict) -> Optional[str]:
    """Where a layer-wise method of ``recipes`` reads more calibration texts per expert (its ``n_samples``) than
    some expert has: one line naming the methods and those experts, else None (``expert_data/count.py``)."""
    from wildmerge.expert_data.count import recipe_asks, text_counts, too_few_texts

    asks = recipe_asks(recipes)
    return too_few_texts(asks, text_counts(pool)) if asks else None
