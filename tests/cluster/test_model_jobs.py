"""The protocol's merged models as cluster jobs on the real engines: a Ray cluster of a head and two worker nodes
(``ray.cluster_utils.Cluster``, each node its own raylet with one CPU) and the one-node Slurm CI starts
(.ci/slurm_up.sh). The quick demo family's main job at one subset per size: every merged model merged, scored and
pruned on a node, the base and experts scored as jobs, and the scores and job ids those of the local executor."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wildmerge.eval.store import ResultStore
from wildmerge.run import RunFolder, read_merge_info

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--base", "demo", "--k", "1", "--sizes", "2", "--methods", "ta", "--limit", "2"]
# Ray's workers run at niceness 15 by default: on a loaded test machine they would wait behind everything else
ENV = {"WILDMERGE_DEMO_QUICK": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_worker_niceness": "0",
       "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def sample(out, *extra, wait=True):
    cmd = [sys.executable, "-m", "wildmerge.cli", "sample", *ARGS, "--out", str(out), *map(str, extra)]
    proc = subprocess.Popen(cmd, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    if not wait:
        return proc
    out_text = proc.communicate(timeout=1500)[0]
    assert proc.returncode == 0, out_text[-3000:]
    return out_text


def scores(run):
    """model id -> (job id, scores) from the run's evaluation index."""
    store = ResultStore(RunFolder(run).eval_dir("demo"))
    return {m: (j, store.load(j).get("scores")) for m, j in store.index().models.items()}


def tables(run):
    """The report's tables by file name (the comparisons with the base and the best expert)."""
    report = RunFolder(run).report_dir()
    return {name: (report / name).read_text() for name in ("table_vs_base.csv", "table_vs_best_expert.csv")}


def merged(run):
    return sorted(d for d in (Path(run) / "models").iterdir() if not d.name.startswith("."))


def no_leftovers(run):
    models = Path(run) / "models"
    if not models.is_dir():  # no merge got as far as writing
        return
    assert not [p.name for p in models.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert not list(models.glob("*/*.safetensors"))  # --keep-models none: every checkpoint pruned


def descendants_of(pid) -> list:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,ppid"], capture_output=True, text=True).stdout.split("\n")[1:]
    children = {}
    for line in out:
        if line.strip():
            p, pp = map(int, line.split())
            children.setdefault(pp, []).append(p)
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("local") / "run"
    sample(run)
    return run


class DiskWatch(threading.Thread):
    """The most merged checkpoints on disk at once while a run goes."""

    def __init__(self, run):
        super().__init__(daemon=True)
        self.folder, self.most, self.stop = Path(run), 0, threading.Event()

    def run(self):  # noqa: D102
        while not self.stop.is_set():
            self.most = max(self.most, len(list((self.folder / "models").glob("*/model.safetensors"))))
            time.sleep(0.05)


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ.update(ENV)
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1, resources={f"worker{i}": 1}) for i in range(2)]
    cluster.wait_for_nodes()
    try:
        yield cluster, nodes
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_ray_cluster_runs_each_model_as_one_job(local_run, ray_cluster, tmp_path):
    """On two Ray worker nodes: at most two checkpoints at once, a job whose evaluation is killed runs once more,
    every record says where it ran, and the scores and job ids are the local executor's."""
    cluster, _ = ray_cluster
    run = tmp_path / "ray"
    watch = DiskWatch(run)
    watch.start()
    proc = sample(run, "--executor", "ray", "--ray-address", cluster.address, "--gpus-per-job", "0",
                  "--keep-models", "none", wait=False)
    killed = None
    while proc.poll() is None and killed is None:  # the first evaluation of a merged model: its Ray worker killed
        for line in subprocess.run(["ps", "-ww", "-eo", "ppid,args"], capture_output=True, text=True).stdout.splitlines():
            parent, _, args = line.strip().partition(" ")
            if "wildmerge.eval.worker" in args and str(run) in args and int(parent) != proc.pid:
                os.kill(int(parent), signal.SIGKILL)  # the model job's own process: Ray loses the task
                killed = parent
                break
        time.sleep(0.2)
    text = proc.communicate(timeout=1500)[0]
    watch.stop.set()
    assert proc.returncode == 0, text[-3000:]
    assert killed and "submitting them once more" in text, text[-3000:]
    assert 1 <= watch.most <= 2  # jobs in flight: one per worker node
    no_leftovers(run)
    assert scores(run) == scores(local_run) and tables(run) == tables(local_run)
    for folder in merged(run):
        info = read_merge_info(folder)
        assert info.executor == "ray" and info.host and info.node.startswith("ray node") and info.weights_pruned
        record = ResultStore(RunFolder(run).eval_dir("demo")).load(scores(run)[folder.name][0])
        assert record["executor"] == "ray" and record["node"].startswith("ray node") and record["device"] == "cpu"
    assert not [p for p in descendants_of(os.getpid()) if "wildmerge.eval.worker" in
                subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(p)], capture_output=True, text=True).stdout]


def test_bad_ray_address_is_one_line_before_anything(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "wildmerge.cli", "sample", *ARGS, "--out", str(tmp_path / "r"),
                           "--executor", "ray", "--ray-address", "127.0.0.1:9"], env={**os.environ, **ENV},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "--ray-address 127.0.0.1:9: no Ray cluster answers there" in proc.stderr
    assert not (tmp_path / "r").exists()


# --- Slurm --------------------------------------------------------------------------------------------------------

UP = REPO / ".ci" / "slurm_up.sh"


@pytest.fixture(scope="module")
def slurm():
    import shutil

    if shutil.which("sbatch") is None:
        pytest.skip("Slurm is not installed (no sbatch on PATH); .ci/slurm_up.sh installs and starts one")
    conf = os.environ.get("SLURM_CONF") or "/tmp/wildmerge-slurm/slurm.conf"
    if os.geteuid() == 0:
        up = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=180)
        conf = next((ln.split("=", 1)[1] for ln in up.stdout.splitlines() if ln.startswith("SLURM_CONF=")), conf)
    os.environ["SLURM_CONF"] = conf
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    if "UP" not in ping.stdout:
        pytest.skip(f"the Slurm controller does not answer ({ping.stdout.strip() or ping.stderr.strip()})")
    return conf


SLURM = ["--executor", "slurm", "--gpus-per-job", "0", "--cpus-per-job", "1", "--slurm-time", "10",
         "--keep-models", "none"]


def queue():
    return subprocess.run(["squeue", "-h", "-n", "wildmerge-model,wildmerge-eval"], capture_output=True,
                          text=True).stdout.strip()


def queue_empties(seconds: int = 30) -> bool:
    """Whether our jobs leave the queue within ``seconds`` (a task that wrote its result may take a moment)."""
    for _ in range(seconds):
        if not queue():
            return True
        time.sleep(1)
    return not queue()


def test_slurm_driver_killed_then_two_drivers_finish_the_run(local_run, slurm, tmp_path):
    """The driver is killed with kill -9 once a model is finished; two drivers started together then finish the
    run without redoing it, the queue empties, and the scores and job ids are the local executor's."""
    run = tmp_path / "slurm"
    first = sample(run, *SLURM, wait=False)
    done_before = None
    while first.poll() is None and done_before is None:
        for folder in (run / "models").glob("*/merge_info.json"):
            info = read_merge_info(folder.parent)
            if info and info.weights_pruned:
                done_before = (folder.parent.name, folder.read_text())
        time.sleep(0.2)
    if first.poll() is None:
        os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert done_before, first.stdout.read()[-3000:]
    drivers = [sample(run, *SLURM, wait=False) for _ in range(2)]
    texts = [d.communicate(timeout=1500)[0] for d in drivers]
    assert all(d.returncode == 0 for d in drivers), texts
    assert (run / "models" / done_before[0] / "merge_info.json").read_text() == done_before[1]  # not redone
    store = ResultStore(RunFolder(run).eval_dir("demo"))
    commands = {store.load(j).get("command") for j, _ in scores(run).values()}
    assert scores(run) == scores(local_run) and tables(run) == tables(local_run)
    no_leftovers(run)
    assert queue_empties()
    for folder in merged(run):
        info = read_merge_info(folder)
        assert info.executor == "slurm" and info.node.startswith("slurm job")
    assert len(commands) >= 2, commands  # the killed driver's and at least one of the two others'


def test_slurm_bad_partition_and_short_time_are_one_line(slurm, tmp_path):
    from wildmerge.cluster.driver import check_time_limit
    from wildmerge.errors import ConfigError
    from wildmerge.eval.options import EvalOptions
    from wildmerge.run import PlanEntry

    proc = subprocess.run([sys.executable, "-m", "wildmerge.cli", "sample", *ARGS, "--out", str(tmp_path / "r"),
                           *SLURM, "--slurm-partition", "gpuz"], env={**os.environ, **ENV},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "--slurm-partition gpuz: no such partition; this cluster has debug" in proc.stderr
    assert not (tmp_path / "r").exists()
    base = tmp_path / "base"  # an 8B Llama's config: the price needs nothing else
    base.mkdir()
    (base / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False}))

    class Models:
        class base:
            path = str(base)

    class Options:
        device = "cpu"

    entry = PlanEntry(model_id="tsv_m__n12_full", kind="merge", path=str(tmp_path / "m"), method="tsv_m",
                      experts=[f"e{i}" for i in range(12)], n=12)
    with pytest.raises(ConfigError, match=r"--slurm-time 1: the merge tsv_m__n12_full alone is priced at"):
        check_time_limit([entry], Models, Options, EvalOptions(executor="slurm", slurm_time=1))


def test_a_slurm_job_lost_twice_is_recorded_failed_and_nothing_is_left(slurm, tmp_path):
    """Every model job is cancelled (scancel) as soon as it runs: each is submitted once more, then its model is
    recorded as failed with the engine's error; the base and experts are still scored, the queue empties, and no
    temporary folder or checkpoint is left."""
    run = tmp_path / "lost"
    proc = sample(run, *SLURM, wait=False)
    cancelled = set()
    while proc.poll() is None:
        out = subprocess.run(["squeue", "-h", "-n", "wildmerge-model", "-o", "%i %T"], capture_output=True,
                             text=True).stdout
        for task in [line.split()[0] for line in out.splitlines() if line.endswith("RUNNING")]:
            subprocess.run(["scancel", task])
            cancelled.add(task)
        time.sleep(0.2)
    text = proc.communicate()[0]
    assert proc.returncode == 1, text[-3000:]  # a model failed
    assert len(cancelled) >= 4 and "submitting them once more" in text, (cancelled, text[-3000:])
    store = ResultStore(RunFolder(run).eval_dir("demo"))
    records = {m: store.load(j) for m, j in store.index().models.items()}
    for model_id, record in records.items():
        if (run / "models" / model_id).exists() or model_id.startswith("ta__"):
            assert record["status"] == "failed" and "the slurm job was lost twice" in record["error"], record
        else:  # the base and the experts
            assert record["status"] == "ok" and record["executor"] == "slurm"
    no_leftovers(run)
    assert queue_empties()


def test_a_slurm_job_lost_once_is_submitted_again_and_the_run_is_the_local_one(local_run, slurm, tmp_path):
    """The first model job to run is cancelled as soon as it runs (scancel, mid-merge): the driver submits it once
    more, and the run finishes with the local executor's scores and tables, nothing left behind."""
    run = tmp_path / "once"
    proc = sample(run, *SLURM, wait=False)
    cancelled = None
    while proc.poll() is None and cancelled is None:
        out = subprocess.run(["squeue", "-h", "-n", "wildmerge-model", "-o", "%i %T"], capture_output=True,
                             text=True).stdout
        running = [line.split()[0] for line in out.splitlines() if line.endswith("RUNNING")]
        if running:
            subprocess.run(["scancel", running[0]])
            cancelled = running[0]
        time.sleep(0.1)
    text = proc.communicate(timeout=1500)[0]
    assert proc.returncode == 0 and cancelled and "submitting them once more" in text, text[-3000:]
    assert scores(run) == scores(local_run) and tables(run) == tables(local_run)
    no_leftovers(run)
    assert queue_empties()
