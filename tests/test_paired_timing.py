"""benchmarks/paired.py, the one way the benchmarks time things: runs interleaved, each run's own peak
memory and timings, cut runs killed, and a figure taken under other processes' load printed as LOADED."""

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _paired():
    spec = importlib.util.spec_from_file_location("paired", BENCHMARKS / "paired.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHILD = r"""
import sys, time
from paired import report_seconds
with open(sys.argv[1], "a") as f:
    f.write(sys.argv[2] + " ")
held = bytearray(int(sys.argv[3]) * 2**20)
start = time.perf_counter()
time.sleep(0.01)
report_seconds("inner", time.perf_counter() - start)
"""


def test_runs_are_interleaved_with_their_own_peak_memory_and_timings(tmp_path):
    paired = _paired()
    log = tmp_path / "order"
    cases = {name: paired.Process(["-c", CHILD, str(log), name, str(mib)]) for name, mib in (("A", 200), ("B", 1))}
    m = paired.measure(cases, rounds=5, warmup=1, progress=lambda text: None)
    assert log.read_text().split() == ["A", "B"] * 6  # one warm-up each, then A B A B ...
    assert [len(m.runs[c]) for c in "AB"] == [5, 5]
    assert all(0.01 <= r.seconds["inner"] < r.seconds["wall"] for c in "AB" for r in m.runs[c])
    a, b = (max(r.peak_rss_mib for r in m.runs[c]) for c in "AB")
    assert a >= 200 and b < 100  # each child's own VmHWM, not this process's (torch is loaded here)
    assert len(m.ratios("A", "B", "inner")) == 5


def test_a_run_past_its_timeout_is_cut_and_killed(tmp_path):
    paired = _paired()
    marker = tmp_path / "alive"
    code = f"import time\nwhile True:\n    open({str(marker)!r}, 'w').close()\n    time.sleep(0.05)\n"
    run = paired.Process(["-c", code], timeout=1.0)()
    assert run.cut and 1.0 <= run.seconds["wall"] < 10
    marker.unlink()
    time.sleep(0.3)
    assert not marker.exists()  # the whole process group is gone


def test_a_measurement_ended_by_sigterm_leaves_no_run_behind(tmp_path):
    """``timeout 300 python bench.py`` sends SIGTERM to the benchmark: the run it is timing (in its own session, so
    a cut can kill its whole group) must go with it, with any load it started."""
    marker = tmp_path / "alive"
    child = f"import time\nwhile True:\n    open({str(marker)!r}, 'w').close()\n    time.sleep(0.05)\n"
    bench = (f"import sys\nsys.path.insert(0, {str(BENCHMARKS)!r})\nimport paired\n"
             f"paired.measure({{'A': paired.Process(['-c', {child!r}])}}, rounds=5, warmup=0)\n")
    proc = subprocess.Popen([sys.executable, "-c", bench], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    marker.unlink()
    time.sleep(0.3)
    assert not marker.exists()  # the run was killed, not orphaned


def _measurement(paired, others_during, others_before=0.0):
    load = paired.Load(0.1, others_before)
    runs = {"base": [paired.Run({"wall": 2.0}, None, [others_during]) for _ in range(5)],
            "case": [paired.Run({"wall": w}, None, [others_during]) for w in (3.0, 3.2, 2.8, 3.0, 3.4)]}
    return paired.Measurement(runs, load, load, rounds=5, warmup=1)


def test_a_figure_under_other_processes_load_is_printed_loaded(capsys):
    paired = _paired()
    quiet = _measurement(paired, others_during=0.2)
    assert paired.ratio_text(quiet, "case", "base") == "1.50x [1.40, 1.70]"
    for loaded in (_measurement(paired, others_during=1.0), _measurement(paired, 0.0, others_before=0.8)):
        assert paired.ratio_text(loaded, "case", "base") == "LOADED"
        paired.print_table(loaded, baseline="base")
        out = capsys.readouterr().out
        assert "LOADED" in out and "1.50x" not in out


def test_the_load_of_this_process_and_its_children_is_not_counted(tmp_path):
    import subprocess

    paired = _paired()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        ours = paired._ours()
        assert busy.pid in ours
        assert paired._running_threads(busy.pid) == 1  # the busy loop runs or waits for a core: ours, not others'
    finally:
        busy.kill()
        busy.wait()
