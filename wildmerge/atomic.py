"""Atomic writes: a file or a directory is complete or absent, so a killed run never leaves half an output.

Write into a temporary sibling, then ``os.replace`` it into place (atomic on POSIX within one filesystem).
"""

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path


def _tmp_sibling(path: Path, kind: str) -> Path:
    """A private temporary sibling, given the permissions a plain ``open`` / ``mkdir`` would have given ``path``
    (tempfile makes them 0600 / 0700, which would leave reports and models unreadable to the user's group)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    make = tempfile.mkdtemp if kind == "dir" else tempfile.mkstemp
    made = make(prefix=f".{path.name}.tmp-", dir=path.parent)
    if kind == "file":
        os.close(made[0])
        made = made[1]
    os.chmod(made, (0o777 if kind == "dir" else 0o666) & ~_umask())
    return Path(made)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path, text: str) -> Path:
    path = Path(path)
    tmp = _tmp_sibling(path, "file")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path, obj, **kwargs) -> Path:
    kwargs.setdefault("indent", 2)
    return write_text(path, json.dumps(obj, default=str, **kwargs) + "\n")


@contextlib.contextmanager
def atomic_dir(path):
    """Yield a temporary directory that becomes ``path`` only if the block finishes without error.

    An existing ``path`` is replaced. Leftover temporary siblings from killed runs are cleaned by
    ``clean_stale_tmp``.
    """
    path = Path(path)
    tmp = _tmp_sibling(path, "dir")
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def clean_stale_tmp(parent) -> int:
    """Remove temporary siblings (``.NAME.tmp-*``, ``.NAME.old-*``) that a killed run left behind."""
    parent, removed = Path(parent), 0
    if not parent.is_dir():
        return 0
    for p in parent.iterdir():
        if p.name.startswith(".") and (".tmp-" in p.name or ".old-" in p.name):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed += 1
    return removed
