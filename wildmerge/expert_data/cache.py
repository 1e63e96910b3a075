"""One cache for every expert's data, keyed by content: a local file by its bytes, a hub dataset or an lm-eval task
by the pinned source (what was read from it is kept as JSONL), generated text by the expert's weights and settings.

Lives in ``$WILDMERGE_DATA_CACHE`` (default ``~/.cache/wildmerge/expert_data``); a run keeps its own copy of its
generated text in its folder so the run carries its inputs (``generated/`` here holds the machine's copy).
"""

import hashlib
import json
import os
from pathlib import Path

_MEMORY: dict = {}


def cache_root() -> Path:
    return Path(os.environ.get("WILDMERGE_DATA_CACHE") or Path.home() / ".cache" / "wildmerge" / "expert_data")


def file_digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def key_of(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def remembered(key: str, produce):
    """``produce()`` once per key in this process (a pool checked at load time is not read twice)."""
    if key not in _MEMORY:
        _MEMORY[key] = produce()
    return _MEMORY[key]


def on_disk(key: str, produce) -> list:
    """Records of a remote source, read once and kept as JSONL under the cache root."""
    from wildmerge.atomic import write_text

    path = cache_root() / "sources" / f"{key}.jsonl"
    if path.is_file():
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    records = produce()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "".join(json.dumps(r, default=str) + "\n" for r in records))
    return records
