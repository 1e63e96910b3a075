"""A protocol recording as one file: every candidate's per-item scores, the arms they were drawn from, and what they
were made with, so the guided search can be replayed (and its rules designed) without the family or a CPU-hour.

``experiment_guided_search.py --save-recording FILE`` writes one after recording; ``--from-recording FILE`` replays
from it. The file is gzipped JSON (``.json.gz``): items as their scores; the merges and the arms in the recording's order (the protocol
order's seeds permute the merges, the searches draw arms in order, so the order is part of the result).
"""

import gzip
import json
from pathlib import Path

FORMAT = 1


def save(path, items: dict, arms: dict, merges: list, experts: list, meta: dict) -> None:
    """Write ``items`` ({candidate: {task: scores}}), ``arms`` ({(method, size): [subsets]}), the merges and experts in
    recording order and ``meta`` (the family's record, versions, the recording's arguments)."""
    doc = {"format": FORMAT, "meta": meta, "merges": merges, "experts": experts,
           "arms": [[m, k, [list(s) for s in subsets]] for (m, k), subsets in arms.items()],  # in order: draws follow it
           "items": {c: {t: [float(x) for x in v] for t, v in sorted(d.items())} for c, d in items.items()}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", compresslevel=9) as f:
        json.dump(doc, f, separators=(",", ":"), sort_keys=True)
    tmp.replace(path)


def load(path) -> dict:
    """The recording at ``path``: ``items`` (numpy arrays), ``arms`` (tuple keys, tuple subsets), ``merges``,
    ``experts`` and ``meta``; one clear error when the file is not a recording of this format."""
    import numpy as np

    try:
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: not a readable recording ({exc}); write one with --save-recording") from exc
    if doc.get("format") != FORMAT:
        raise SystemExit(f"{path}: recording format {doc.get('format')!r}, this script reads format {FORMAT}")
    arms = {(method, size): [tuple(s) for s in subsets] for method, size, subsets in doc["arms"]}
    items = {c: {t: np.asarray(v, dtype=np.float64) for t, v in d.items()} for c, d in doc["items"].items()}
    missing = [c for c in doc["merges"] + doc["experts"] + ["base"] if c not in items]
    if missing:
        raise SystemExit(f"{path}: {len(missing)} candidates without scores ({', '.join(missing[:3])}, ...)")
    return {"items": items, "arms": arms, "merges": doc["merges"], "experts": doc["experts"], "meta": doc["meta"]}
