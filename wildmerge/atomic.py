"""Atomic writes: a file or a directory is complete or absent, so a killed run never leaves half an output.

Write into a temporary sibling, then ``os.replace`` it into place (atomic on POSIX within one filesystem). A
sibling's name records its writer (``.NAME.tmp-PID-HOST-*``, HOST a hash of the host name), so that a later run
removes what a killed writer left (``clean_stale_tmp``) and keeps what a live one is still writing.
"""

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Optional

from wildmerge.errors import WildmergeError

OWNED = re.compile(r"\.(?:tmp|old)-(\d+)-([0-9a-f]{8})-[^.]*$")  # the writer of a temporary sibling
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
READ_ONLY = (errno.EROFS,)
NO_PERMISSION = (errno.EACCES, errno.EPERM)


def storage_error(exc: OSError, path=None) -> Optional[WildmergeError]:
    """A full disk, a read-only filesystem or a missing permission as one line naming the path and the fix (a write
    of a full disk raises ENOSPC without a file name: ``path`` is what was being written); None for other errors."""
    where = exc.filename or path
    if exc.errno in DISK_FULL:
        return WildmergeError(f"no space left on the device while writing {where} ({exc.strerror}); free space there "
                              f"or write elsewhere (--out)")
    if exc.errno in READ_ONLY:
        return WildmergeError(f"cannot write {where}: read-only file system; make it writable or write elsewhere "
                              f"(--out)")
    if exc.errno in NO_PERMISSION:
        return WildmergeError(f"permission denied on {where} ({exc.strerror}); fix its permissions or use another "
                              f"folder")
    return None


@contextlib.contextmanager
def named_storage_errors(path):
    """Turn a full disk or a read-only filesystem met while writing ``path`` into a ``WildmergeError``."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_FULL + READ_ONLY:
            raise
        raise storage_error(exc, path) from None
    except Exception as exc:  # writers in Rust (safetensors) report the OS error only in their message
        for code in DISK_FULL + READ_ONLY:
            if f"(os error {code})" in str(exc):
                raise storage_error(OSError(code, os.strerror(code)), path) from None
        raise


def _tmp_sibling(path: Path, kind: str) -> Path:
    """A private temporary sibling, given the permissions a plain ``open`` / ``mkdir`` would have given ``path``
    (tempfile makes them 0600 / 0700, which would leave reports and models unreadable to the user's group)."""
    make = tempfile.mkdtemp if kind == "dir" else tempfile.mkstemp
    with named_storage_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        made = make(prefix=f".{path.name}.tmp-{_owner()}-", dir=path.parent)
    if kind == "file":
        os.close(made[0])
        made = made[1]
    os.chmod(made, (0o777 if kind == "dir" else 0o666) & ~_umask())
    return Path(made)


def _host() -> str:
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def _owner() -> str:
    """``PID-HOST`` of this process: written into its temporary siblings' names."""
    return f"{os.getpid()}-{_host()}"


def writer_alive(name: str) -> bool:
    """Whether the process that made the temporary sibling ``name`` may still be writing it: yes for a live process
    of this machine or one of another machine (unknowable from here); no for a dead one, or a name that records no
    writer (made by hand or by an older version)."""
    match = OWNED.search(name)
    if match is None:
        return False
    if match.group(2) != _host():
        return True
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path, text: str) -> Path:
    path = Path(path)
    tmp = _tmp_sibling(path, "file")
    try:
        with named_storage_errors(path):
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
        with named_storage_errors(path):  # also what the block writes (mergekit's shards): a full disk names ``path``
            yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old-{_owner()}-{secrets.token_hex(4)}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def clean_stale_tmp(parent) -> int:
    """Remove the temporary siblings (``.NAME.tmp-*``, ``.NAME.old-*``) in ``parent`` that a killed writer left
    behind; those of a live writer (another command on the same folder) stay. Returns how many were removed."""
    parent, removed = Path(parent), 0
    if not parent.is_dir():
        return 0
    for p in parent.iterdir():
        if p.name.startswith(".") and (".tmp-" in p.name or ".old-" in p.name) and not writer_alive(p.name):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed += 1
    return removed
