"""One way to time things against each other, used by every benchmark here: interleaved runs, the
median of pairwise ratios, each run's own peak memory, and the machine's load, with loaded figures marked.

- **Interleaved**: after one warm-up run of each case (not kept), round after round runs every case once in the
  same order (A B A B ... for two); at least 5 rounds. A ratio is taken within each round (case / baseline) and
  the median of those is reported with its min and max, so a drift of the machine's speed hits both sides alike.
- **A run** is a whole fresh process (``Process``: a Python program, a console script such as ``mergekit-yaml``,
  ``-c CODE`` or ``-m MODULE``, run by this file's launcher so that its own peak RSS, VmHWM, can be read when it
  ends), or a callable in this process (``Call``; no peak RSS of its own). Its time is the wall time of the
  whole run; a child may also report its own timings (``report_seconds``), which are compared the same way.
- **Load**: before and after all runs, the 1-minute load average and the run queue now (``procs_running`` of
  ``/proc/stat``, the same count as ``/proc/loadavg``'s 4th field) less this benchmark's own running threads
  (this process and every descendant: the run itself, and any load a benchmark starts on purpose); during every
  run the same count every 0.1 s. When other processes kept more than ``LOADED_ABOVE`` cores busy (before, during
  or after), a figure is printed as ``LOADED`` and not as a ratio: it is no speed-up figure.

Use from a benchmark (the benchmark's folder is on ``sys.path`` when it runs as a script)::

    from paired import Process, measure, print_table
    m = measure({"ta": Process(["mergekit-yaml", "ta.yml", "out"]), "iso_c": Process([...])}, rounds=5)
    print_table(m, baseline="ta")

or from the shell: ``python benchmarks/paired.py --a "python x.py" --b "python y.py" [--rounds 5]``.
"""

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

LOADED_ABOVE = 0.5  # cores of other processes' work above which a figure is LOADED
SAMPLE_EVERY = 0.1  # seconds between run-queue samples during a run
REPORT_ENV = "PAIRED_REPORT"  # the file a child's own figures go to
TIME_CALL_ENV = "PAIRED_TIME_CALL"  # "module:function": the launcher times that function's calls in the child


# ---------------------------------------------------------------- what a child reports


def report_seconds(name: str, seconds: float) -> None:
    """In a child run by ``Process``: a timing of its own (e.g. the kernel alone, without imports), compared across
    cases like the wall time. Does nothing when not run by ``Process``."""
    _add_to_report({"seconds": {name: seconds}})


def _add_to_report(values: dict) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    try:
        with open(path) as f:
            found = json.load(f)
    except (OSError, ValueError):
        found = {}
    for key, value in values.items():
        found[key] = {**found.get(key, {}), **value} if isinstance(value, dict) else value
    with open(path, "w") as f:
        json.dump(found, f)


def _vm_hwm_mib(pid="self") -> Optional[float]:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _time_calls(target: str) -> None:
    """Wrap ``module:function`` so that the time spent in its calls is reported under the function's name (e.g.
    ``mergekit.merge:run_merge``: the merge without the interpreter's start and the imports)."""
    import functools
    import importlib

    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)
    original, spent = getattr(module, name), [0.0]

    @functools.wraps(original)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
            report_seconds(name, spent[0])

    setattr(module, name, timed)


def _launch(argv: List[str]) -> None:
    """The child side of ``Process``: run a Python program in this process, then report its own peak RSS."""
    import runpy

    code = 0
    target = os.environ.pop(TIME_CALL_ENV, None)
    try:
        if target:
            _time_calls(target)
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        elif argv[0] == "-m":
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            path = argv[0] if os.path.isfile(argv[0]) else shutil.which(argv[0])
            sys.argv = [path, *argv[1:]]
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    finally:
        _add_to_report({"peak_rss_mib": _vm_hwm_mib()})
    sys.exit(code)


# ---------------------------------------------------------------- a load that starts during a call (in a child)


class StartingLoad:
    """``cores`` busy-loop processes of the benchmark's own, resumed ``after`` seconds into the block::

        with StartingLoad(cores, after):
            timed_call()

    They are started stopped before the block, so the call pays nothing for starting interpreters, and killed when
    it ends. With ``cores = 0`` nothing happens. A benchmark's own loops do not make its figures LOADED."""

    LOOP = "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\nwhile True: pass\n"

    def __init__(self, cores: int, after: float):
        self.cores, self.after = cores, after
        self.loops: List[subprocess.Popen] = []
        self.timer: Optional[threading.Timer] = None

    def __enter__(self) -> "StartingLoad":
        self.loops = [subprocess.Popen([sys.executable, "-c", self.LOOP]) for _ in range(self.cores)]
        while not all(_stopped(p.pid) for p in self.loops):
            time.sleep(0.01)
        if self.loops:
            self.timer = threading.Timer(self.after, self._resume)
            self.timer.start()
        return self

    def _resume(self) -> None:
        for p in self.loops:
            os.kill(p.pid, signal.SIGCONT)

    def __exit__(self, *exc) -> None:
        if self.timer:
            self.timer.cancel()
            self.timer.join()  # a load being resumed is running before it is stopped
        for p in self.loops:
            p.kill()
            p.wait()
        self.loops = []


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "T"
    except OSError:
        return False


# ---------------------------------------------------------------- load


def _running_now() -> Optional[int]:
    try:
        for line in open("/proc/stat"):
            if line.startswith("procs_running"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _ours() -> List[int]:
    """This process and all its descendants."""
    found, frontier = [], [os.getpid()]
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    frontier += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return found


def _running_threads(pid: int) -> int:
    from wildmerge.resources import running_threads

    return running_threads(pid)


def others_running() -> Optional[float]:
    """Threads of other processes running or waiting for a core now: the run queue less ours; None if unknown."""
    total = _running_now()
    if total is None:
        return None
    return float(max(0, total - sum(_running_threads(p) for p in _ours())))


@dataclass
class Load:
    average_1min: Optional[float]
    others: Optional[float]  # mean over the samples

    @staticmethod
    def now(samples: int = 10) -> "Load":
        values = []
        for _ in range(samples):
            values.append(others_running())
            time.sleep(SAMPLE_EVERY)
        known = [v for v in values if v is not None]
        return Load(os.getloadavg()[0], statistics.mean(known) if known else None)

    def text(self) -> str:
        others = "unknown" if self.others is None else f"{self.others:.2f}"
        return f"1-min average {self.average_1min:.2f}, other processes running now {others}"


class _Sampler:
    """Other processes' running threads every ``SAMPLE_EVERY`` seconds while a run lasts."""

    def __init__(self):
        self.samples: List[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.wait(SAMPLE_EVERY):
            value = others_running()
            if value is not None:
                self.samples.append(value)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------- runs


@dataclass
class Run:
    seconds: Dict[str, float]  # "wall" and what the run reported itself
    peak_rss_mib: Optional[float]
    others: List[float]  # other processes' running threads, sampled during the run
    cut: bool = False  # stopped at its timeout: the seconds are a lower bound


class Process:
    """A whole fresh process: ``argv`` is a Python program (a path or a console script on ``PATH``, with its
    arguments), or ``["-c", CODE, ...]`` / ``["-m", MODULE, ...]``. ``env`` replaces the environment's variables
    named (None removes one); ``timeout`` seconds cut a run (its time is then a lower bound); ``before`` runs
    before each run, untimed (e.g. to empty an output folder); ``time_call`` (``module:function``) is also timed
    inside the run, reported under the function's name (imported before the program starts, so the program sees
    the timed one)."""

    def __init__(self, argv: Sequence[str], env: Optional[Dict[str, Optional[str]]] = None,
                 timeout: Optional[float] = None, cwd: Optional[str] = None, show_output: bool = False,
                 before: Optional[Callable[[], None]] = None, time_call: Optional[str] = None):
        self.argv, self.env, self.timeout, self.cwd, self.show_output = list(argv), env or {}, timeout, cwd, show_output
        self.before = before
        if time_call:
            self.env = {**self.env, TIME_CALL_ENV: time_call}
        program = self.argv[0]
        if program not in ("-c", "-m") and not _is_python(program):
            raise SystemExit(f"paired.Process runs Python programs (a script, a console script, -c or -m); "
                             f"{program!r} is none")

    def __call__(self) -> Run:
        if self.before is not None:
            self.before()
        env = {k: v for k, v in os.environ.items() if self.env.get(k, "") is not None}
        env.update({k: v for k, v in self.env.items() if v is not None})
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            env[REPORT_ENV] = f.name
        out = None if self.show_output else subprocess.DEVNULL
        try:
            with _Sampler() as sampler:
                start = time.perf_counter()
                proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--launch", "--", *self.argv],
                                        env=env, cwd=self.cwd, stdout=out, stderr=out, start_new_session=True)
                cut = False
                try:
                    code = proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    code, cut = proc.wait(), True
                except BaseException:  # interrupted or terminated: the run's own session (and loads) go too
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise
                wall = time.perf_counter() - start
            if code and not cut:
                raise RuntimeError(f"{shlex.join(self.argv)} exited with status {code}"
                                   + ("" if self.show_output else " (rerun with its output shown to see why)"))
            try:
                with open(env[REPORT_ENV]) as f:
                    reported = json.load(f)
            except (OSError, ValueError):
                reported = {}
        finally:
            os.unlink(env[REPORT_ENV])
        return Run({"wall": wall, **reported.get("seconds", {})}, reported.get("peak_rss_mib"), sampler.samples, cut)


def _is_python(program: str) -> bool:
    path = program if os.path.isfile(program) else shutil.which(program)
    if not path:
        return False
    if path.endswith(".py"):
        return True
    try:
        with open(path, "rb") as f:
            return b"python" in f.readline()
    except OSError:
        return False


class Call:
    """A callable run in this process; its time is the call's wall time (no peak RSS of its own)."""

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn

    def __call__(self) -> Run:
        with _Sampler() as sampler:
            start = time.perf_counter()
            self.fn()
            wall = time.perf_counter() - start
        return Run({"wall": wall}, None, sampler.samples)


# ---------------------------------------------------------------- measuring and printing


@dataclass
class Measurement:
    runs: Dict[str, List[Run]]  # per case, in round order
    before: Load
    after: Load
    rounds: int
    warmup: int
    cores: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))

    def others_during(self, *cases: str) -> float:
        samples = [v for c in cases for r in self.runs[c] for v in r.others]
        return statistics.mean(samples) if samples else 0.0

    def loaded(self, *cases: str) -> bool:
        """Whether other processes kept more than ``LOADED_ABOVE`` cores busy before, during (these cases) or after."""
        around = [x.others for x in (self.before, self.after) if x.others is not None]
        return max([self.others_during(*cases), *around]) > LOADED_ABOVE

    def ratios(self, case: str, baseline: str, key: str = "wall") -> List[float]:
        """``case / baseline`` within each round."""
        return [a.seconds[key] / b.seconds[key] for a, b in zip(self.runs[case], self.runs[baseline])
                if key in a.seconds and key in b.seconds and b.seconds[key] > 0]

    def median(self, case: str, key: str = "wall") -> Optional[float]:
        values = [r.seconds[key] for r in self.runs[case] if key in r.seconds]
        return statistics.median(values) if values else None

    def as_dict(self) -> dict:
        return {"rounds": self.rounds, "warmup": self.warmup, "cores": self.cores,
                "before": vars(self.before), "after": vars(self.after),
                "runs": {c: [vars(r) for r in runs] for c, runs in self.runs.items()}}


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def measure(cases: Dict[str, Callable[[], Run]], rounds: int = 5, warmup: int = 1,
            progress: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)) -> Measurement:
    """Every case ``warmup`` times (not kept), then ``rounds`` rounds of every case once, in the given order. A
    SIGTERM (``timeout``, a scheduler) ends the measurement like Ctrl-C: the running case's processes are killed."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
    if rounds < 5:
        progress(f"paired: {rounds} rounds (fewer than 5): a trial, not a figure to quote")
    before = Load.now()
    for i in range(warmup):
        for name, run in cases.items():
            progress(f"  warm-up {i + 1}/{warmup}: {name}")
            run()
    runs: Dict[str, List[Run]] = {name: [] for name in cases}
    for i in range(rounds):
        for name, run in cases.items():
            runs[name].append(run())
            r = runs[name][-1]
            progress(f"  round {i + 1}/{rounds}: {name} {r.seconds['wall']:.2f} s"
                     + (" (cut)" if r.cut else "") + (f", others {statistics.mean(r.others):.1f}" if r.others else ""))
    return Measurement(runs, before, Load.now(), rounds, warmup)


def ratio_text(m: Measurement, case: str, baseline: str, key: str = "wall") -> str:
    """``median [min, max]`` of the pairwise ratios, or ``LOADED``."""
    if m.loaded(case, baseline):
        return "LOADED"
    values = m.ratios(case, baseline, key)
    if not values:
        return "-"
    cut = any(r.cut for c in (case, baseline) for r in m.runs[c])
    return (f"{statistics.median(values):.2f}x [{min(values):.2f}, {max(values):.2f}]"
            + (" (cut runs: bounds)" if cut else ""))


def print_table(m: Measurement, baseline: str, keys: Sequence[str] = ("wall",), title: str = "") -> None:
    """A markdown table: per case and timing, the median seconds and the ratio to ``baseline``; peak RSS; the load."""
    print(f"\n{title}" if title else "")
    print(f"{m.rounds} rounds after {m.warmup} warm-up, interleaved; {m.cores} cores in this process's mask")
    print(f"load before: {m.before.text()}; after: {m.after.text()}")
    head = " | ".join(f"{k} s | {k} / {baseline}" for k in keys)
    print(f"| case | {head} | peak RSS MiB | others running during |")
    print("|---|" + "---|---|" * len(keys) + "---|---|")
    for case, runs in m.runs.items():
        cells = []
        for k in keys:
            med = m.median(case, k)
            cells.append("-" if med is None else f"{med:.3f}")
            cells.append("1.00x" if case == baseline else ratio_text(m, case, baseline, k))
        rss = [r.peak_rss_mib for r in runs if r.peak_rss_mib is not None]
        cells.append(f"{max(rss):.0f}" if rss else "-")
        cells.append(f"{m.others_during(case):.2f}")
        print(f"| {case} | " + " | ".join(cells) + " |")
    if m.loaded(*m.runs):
        print(f"LOADED: other processes kept more than {LOADED_ABOVE} cores busy (before, during or after): the "
              f"ratios marked LOADED are no speed-up figures; rerun on a quiet machine")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="command A (a Python program and its arguments)")
    ap.add_argument("--b", required=True, help="command B, the baseline: ratios are A / B")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=None)
    args = ap.parse_args()
    m = measure({"A": Process(shlex.split(args.a), timeout=args.timeout),
                 "B": Process(shlex.split(args.b), timeout=args.timeout)}, args.rounds, args.warmup)
    print_table(m, baseline="B")
    return 0


if __name__ == "__main__":
    if sys.argv[1:3] == ["--launch", "--"]:
        _launch(sys.argv[3:])
    sys.exit(main())
