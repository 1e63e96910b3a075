"""Claims on shared work (a merge, an evaluation job) that a killed holder cannot leave stuck.

Two commands on one run folder must split the work, not do it twice or undo each other. A claim is an exclusive
``flock`` on a small lock file: the kernel drops it when the holding process exits for any reason, ``kill -9`` and
the out-of-memory killer included, so there is no stale lock to clean up and no lease to time out. The lock file
itself is never deleted (deleting it would let a second process lock a fresh inode while the first still holds the
old one); it holds the holder's pid, host and start time, for the message of whoever waits.

``flock`` is per open file: it excludes processes on one machine and, on NFS v4 / Lustre / GPFS with locking
enabled, across nodes.
"""

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Callable, Iterable, List, Optional, TypeVar

T = TypeVar("T")


class Claim:
    """An exclusive hold on ``path`` (a lock file), released by ``release()``, ``with``, or the holder's death."""

    def __init__(self, path, fd: int):
        self.path, self._fd = Path(path), fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _open(path) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _stamp(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}\n".encode(), 0)


def try_claim(path) -> Optional[Claim]:
    """The claim on ``path`` if nobody holds it now, else None (never waits)."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    _stamp(fd)
    return Claim(path, fd)


def holder(path) -> str:
    """Who holds (or last held) the claim, as written in its lock file."""
    try:
        return Path(path).read_text().strip() or "another process"
    except OSError:
        return "another process"


def wait_claim(path, poll: float = 0.5, on_wait: Optional[Callable[[str], None]] = None) -> Claim:
    """The claim on ``path``, waiting while another process holds it (``on_wait(holder)`` is told once)."""
    told = False
    while True:
        claim = try_claim(path)
        if claim is not None:
            return claim
        if not told and on_wait is not None:
            on_wait(holder(path))
            told = True
        time.sleep(poll)


def split_work(items: Iterable[T], claim_path: Callable[[T], Path], is_done: Callable[[T], bool],
               do: Callable[[T], None], on_wait: Optional[Callable[[T, str], None]] = None) -> List[T]:
    """Do every item that is not done, sharing the work with other processes running the same loop.

    First pass: items another process holds are put aside, the rest are claimed, checked again and done. Second
    pass: wait for each item put aside; when its holder finished it, it is done; when its holder died, do it here.
    Returns the items done by this process.
    """
    mine, busy = [], []
    for item in items:
        claim = try_claim(claim_path(item))
        if claim is None:
            busy.append(item)
            continue
        with claim:
            if not is_done(item):
                do(item)
                mine.append(item)
    for item in busy:
        tell = (lambda who, item=item: on_wait(item, who)) if on_wait else None
        with wait_claim(claim_path(item), on_wait=tell):
            if not is_done(item):
                do(item)
                mine.append(item)
    return mine
