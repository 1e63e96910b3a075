"""How many texts each expert of a pool has, against how many a data method reads of each: the one count behind
``wildmerge sample``'s pre-flight and dry run, the calibration-sample sweeps' cap (``planning/sample_cap.py``) and
the search's default arms (``search/defaults.py``).

A layer-wise merge (RegMean, Chain of Merges, AdaMerging ...) reads its recipe's ``calibration: n_samples`` texts of
each expert and stops at its merge when one has fewer; counted here first, through ``read.text_count`` (a
``generate`` source says how many it will sample, every other source is read once, then cached).
"""

from typing import Dict, Optional

from wildmerge.expert_data.read import text_count
from wildmerge.expert_data.recipe import text_source


def text_counts(pool, kinds=None, fixed: bool = True) -> Dict[str, int]:
    """{expert: how many texts it has} for the experts of ``pool`` with data, in pool order (an expert without any
    is the missing-data check's to say). ``kinds``: only text sources of these kinds (``file``, ``generate`` ...:
    what a dry run may read); ``fixed=False``: only the experts whose merge reads its recipe's count, so not
    ``generate`` (a merge then uses what was generated) nor a source that sets its own ``n`` (checked at pool load)."""
    counts = {}
    for expert in pool.experts:
        data = pool.data_for(expert)
        source = text_source(data)
        if source is None or (kinds is not None and source.kind not in kinds):
            continue
        if not fixed and (source.kind == "generate" or source.n is not None):
            continue
        counts[expert.label] = text_count(data, expert.label, relative_to=pool.folder)
    return counts


def recipe_asks(recipes) -> Dict[str, int]:
    """{method: texts it reads of each expert} for the data methods among ``recipes`` ({name: MethodRecipe}; a
    layer-wise method's recipe has a ``calibration:`` section): their ``calibration: n_samples``."""
    return {name: int(n) for name, r in recipes.items() if (n := (r.calibration or {}).get("n_samples"))}


def too_few_texts(asks: Dict[str, int], counts: Dict[str, int]) -> Optional[str]:
    """One line naming the methods of ``asks`` that read more texts of each expert than some expert of ``counts``
    has, how many they read, and those experts with their counts (fewest first, then in pool order); None when every expert has
    enough."""
    if not asks or not counts:
        return None
    over = {m: n for m, n in asks.items() if n > min(counts.values())}
    if not over:
        return None
    most = max(over.values())
    if len(set(over.values())) == 1:
        methods = f"{' and '.join(over)} read{'s' if len(over) == 1 else ''} {most} texts of each expert"
    else:
        methods = ", ".join(f"{m} reads {n}" if i == 0 else f"{m} {n}"
                            for i, (m, n) in enumerate(sorted(over.items(), key=lambda kv: -kv[1])))
        methods += " texts of each expert"
    short = sorted(((c, e) for e, c in counts.items() if c < most), key=lambda ce: ce[0])
    experts = ", ".join(f"{e} has {c}" if i == 0 else f"{e} {c}" for i, (c, e) in enumerate(short))
    return f"{methods}, and {experts}"
