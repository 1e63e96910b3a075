"""Child processes die with the process that started them, ``kill -9`` of the parent included.

The parent keeps one pipe open for its whole life and never writes to it; every child gets the read end (``popen``
passes it; a ``multiprocessing`` child has its parent's sentinel, the same kind of pipe) and calls ``hold`` first
thing. ``hold`` makes the child the leader of a new session, so whatever it starts in turn (lm-eval's or a library's
subprocesses) stays in its process group even once orphaned (and gives the session's scheduling group the
child's niceness, so ``nice`` on a command reaches its workers), and starts a thread that blocks reading the pipe. The
read returns end-of-file only when no process holds the write end any more: the parent has exited, however it
died (the kernel closes a dead process's files). The thread then kills the child's process group: the child and
everything it started, at once. ``kill`` does the same from the parent's side (a hung worker is replaced).

Why a pipe rather than ``prctl(PR_SET_PDEATHSIG)``: the kernel sends that signal when the *thread* that started the
child ends (the local evaluator starts workers from threads that end before the workers do), and it kills the child
alone, leaving the child's own children behind. A pipe has neither problem and no start-up race: a parent that died
before the child's thread started has already closed its end. Its one limit: a process ``fork``-ed (not spawned)
from the parent inherits the write end, so the children see end-of-file only once that process has exited too.
"""

import os
import signal
import stat
import subprocess
import threading
from typing import Optional

ENV = "WILDMERGE_LIFELINE"  # the read end's descriptor number in a child started by ``popen``
_pipe = {"pid": None, "read": None, "write": None}
_lock = threading.Lock()


def _read_end() -> int:
    """This process's lifeline (made on first use; a forked copy makes its own): the end its children watch."""
    with _lock:
        if _pipe["pid"] != os.getpid():
            read, write = os.pipe()  # not inherited by children unless passed (PEP 446)
            _pipe.update(pid=os.getpid(), read=read, write=write)
        return _pipe["read"]


def popen(cmd, env: Optional[dict] = None, pass_fds=(), **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(cmd, ...)`` of a wildmerge child that calls ``hold()``: in its own session, tied to this
    process by the lifeline."""
    fd = _read_end()
    env = {**(os.environ if env is None else env), ENV: str(fd)}
    return subprocess.Popen(cmd, env=env, pass_fds=(*pass_fds, fd), start_new_session=True, **kwargs)


def run(cmd, **kwargs) -> int:
    """``popen(cmd, **kwargs)`` waited for (``reap``); its exit code (negative: killed by that signal). An
    interrupted wait (Ctrl-C) kills the child and what it started."""
    proc = popen(cmd, **kwargs)
    try:
        return reap(proc)
    except BaseException:
        kill(proc)
        raise


def reap(proc: subprocess.Popen) -> int:
    """Wait for a child of ``popen`` to end, kill what it left running in its process group (a crashed worker's
    subprocesses), then reap it; its own exit code."""
    if proc.returncode is None:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: its pid is still its own
        _kill(proc.pid)
    return proc.wait()


def kill(proc) -> None:
    """SIGKILL a child started here and, when it leads its own process group (``popen``, ``hold``), what it
    started; then reap it. ``proc``: a ``subprocess.Popen`` or ``multiprocessing.Process``."""
    reaped = proc.returncode if isinstance(proc, subprocess.Popen) else proc.exitcode
    if reaped is None:  # once reaped, its pid may belong to another process
        _kill(proc.pid)
    proc.wait() if isinstance(proc, subprocess.Popen) else proc.join()


def _kill(pid: int) -> None:
    """SIGKILL an unreaped child's process group when it leads one, else the child alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def hold(fd: Optional[int] = None) -> bool:
    """In a child, first thing: die with the parent, taking along what this process starts (module docstring).

    ``fd``: the read end to watch; by default the one ``popen`` passed (a ``multiprocessing`` child passes
    ``multiprocessing.parent_process().sentinel``). False when there is none (started by hand): nothing to watch.
    """
    if fd is None:
        given = os.environ.pop(ENV, "")  # not for this process's own children: they get their own
        if not given.isdigit():
            return False
        fd = int(given)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
    except OSError:
        return False
    if os.getpgid(0) != os.getpid():
        os.setsid()  # not yet a group leader (a multiprocessing child): lead a new session and group
    _keep_niceness()
    threading.Thread(target=_watch, args=(fd,), name="wildmerge-lifeline", daemon=True).start()
    return True


def _keep_niceness() -> None:
    """Under the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) a new session is a new
    scheduling group whose CPU share ignores its processes' niceness: ``nice wildmerge eval ...`` would lower the
    command and not its workers, which do the work. Give this session's group the niceness this process inherited
    (lowering priority needs no privilege; a niceness of 0 leaves the group as it is)."""
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness <= 0:
        return
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(niceness))
    except OSError:  # no autogroup (kernel option off or absent): niceness already applies as it is
        pass


def _watch(fd: int) -> None:
    """Block until the parent's end closes, then kill this process's group (this process included)."""
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except InterruptedError:
            continue
        except OSError:  # the descriptor was closed under us: nothing left to watch
            return
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
