"""Per-model (and per-pair) statistics on disk, keyed by what they depend on, so adding one expert to a pool costs
that expert's work (its SVDs, forward and backward passes, and its dot products with the others), never a
recomputation of the rest.

Layout: ``ROOT/<base fingerprint>/<group>-<settings hash>/<key>.safetensors``. A checkpoint's fingerprint is its
resolved path and the size and modification time of its weight files: a checkpoint replaced in place is recomputed.
"""

import hashlib
import json
from pathlib import Path
from typing import Dict, Optional


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint(folder: str) -> str:
    from wildmerge.checkpoints import weight_files

    files = weight_files(folder)
    return _sha([str(Path(folder).resolve())] + [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files])


def data_fingerprint(items) -> str:
    return _sha([[i["prompt"], i["answer"]] for i in items])


class StatsCache:
    """Tensors by (group, settings, key); ``None`` root keeps everything in memory (tests, one-off calls)."""

    def __init__(self, root: Optional[str], base: str):
        self.root = Path(root) / fingerprint(base) if root else None
        self._memory: Dict[str, dict] = {}

    def path(self, group: str, settings: dict, key: str) -> Optional[Path]:
        return self.root / f"{group}-{_sha(settings)}" / f"{key}.safetensors" if self.root else None

    def get(self, group: str, settings: dict, key: str) -> Optional[dict]:
        from safetensors.torch import load_file

        p = self.path(group, settings, key)
        if p is None:
            return self._memory.get(f"{group}/{_sha(settings)}/{key}")
        return load_file(str(p)) if p.is_file() else None

    def put(self, group: str, settings: dict, key: str, tensors: dict) -> None:
        """Write atomically (a killed run leaves the old file or none)."""
        import os

        from safetensors.torch import save_file

        tensors = {k: v.contiguous() for k, v in tensors.items()}
        p = self.path(group, settings, key)
        if p is None:
            self._memory[f"{group}/{_sha(settings)}/{key}"] = tensors
            return
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
        save_file(tensors, str(tmp))
        os.replace(tmp, p)
