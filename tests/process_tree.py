"""Real process trees for the no-process-left-behind tests.

A command is started with a marker in its environment; every process it starts inherits it, so ``marked(tag)``
finds the whole tree from ``/proc`` (Linux), orphans included once their parent is gone. ``kill_marked`` ends what
a failing test would otherwise leave running. ``killed_writer``: what a process killed inside ``atomic_dir`` leaves.
"""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List

MARK = "WILDMERGE_TEST_TREE"


def new_tag() -> str:
    return uuid.uuid4().hex


def marked_env(tag: str, **extra) -> Dict[str, str]:
    """This process's environment with the marker, and the test's import path (the worktree's code first)."""
    return {**os.environ, MARK: tag, "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def _stat(pid: int):
    """(state, parent pid) of a process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def _pids() -> List[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def marked(tag: str) -> List[int]:
    """Live processes (zombies left out) that carry the marker."""
    needle = f"{MARK}={tag}".encode()
    out = []
    for pid in _pids():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        stat = _stat(pid)
        if needle in env and stat is not None and stat[0] != "Z":
            out.append(pid)
    return out


def children(pid: int) -> List[int]:
    return [p for p in _pids() if (_stat(p) or ("", 0))[1] == pid]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "(gone)"


def wait_gone(tag: str, seconds: float) -> Dict[int, str]:
    """Wait until no marked process remains; those still there after ``seconds``, with their command lines."""
    deadline = time.time() + seconds
    while time.time() < deadline and marked(tag):
        time.sleep(0.1)
    return {pid: cmdline(pid) for pid in marked(tag)}


def wait_for(condition, seconds: float, proc=None) -> bool:
    """Poll ``condition()`` until true (False after ``seconds``, or once ``proc`` has exited)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def kill_marked(tag: str) -> None:
    for pid in marked(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


WRITER = """
import sys, time
from pathlib import Path
from wildmerge.atomic import atomic_dir
with atomic_dir(sys.argv[1]) as tmp:
    (Path(tmp) / "model.safetensors").write_bytes(b"half a model")
    print(tmp, flush=True)
    time.sleep(600)
"""


def killed_writer(path) -> Path:
    """The temporary folder of a real process SIGKILLed while it wrote ``path`` through ``atomic_dir``."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env=marked_env(new_tag()),
                            stdout=subprocess.PIPE, text=True)
    try:
        tmp = Path(proc.stdout.readline().strip())
    finally:
        proc.kill()
        proc.wait()
    assert tmp.is_dir() and tmp.name.startswith(f".{Path(path).name}.tmp-"), tmp
    return tmp
