"""A merge's file does not depend on the host's threads: every shipped method, merged by the protocol on one thread
and one worker, and on four torch threads with two merge workers while another process keeps a core busy (the
thread policy then picks other widths), writes the same bytes. On the quick demo family (every method, the
data-based ones with each expert's items) and on a tiny Llama (the per-tensor methods)."""

import multiprocessing as mp
from pathlib import Path

import pytest
import torch

from helpers import make_tiny_model, write_pool
from wildmerge.threads import THREADS_ENV
from wildmerge.cli import main

SHIPPED = sorted(p.stem for p in (Path(__file__).parents[2] / "merge_recipes" / "methods").glob("*.yml"))
# the methods that read each expert's data (the tiny Llama has none) or a model pass
DATA = {"regmean", "com", "fisher", "mats", "prodistill", "localize_stitch_trained", "adamerging", "adamerging_pp",
        "metagpt_block", "norm_avg_block", "lines_ta", "lines_consensus", "zhou2026_dare"}


def _busy(stop):
    while not stop.is_set():
        sum(i * i for i in range(10000))


def merged(pool, out, methods, *, threads: int, workers: int, loaded: bool, monkeypatch) -> dict:
    """{model id: bytes of every weight file} of ``sample --no-evaluate`` with these threads."""
    monkeypatch.delenv(THREADS_ENV, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    stop = mp.get_context("spawn").Event()
    busy = mp.get_context("spawn").Process(target=_busy, args=(stop,), daemon=True) if loaded else None
    try:
        if busy:
            busy.start()
        rc = main(["sample", "--base", str(pool), "--out", str(out), "--sizes", "2", "--k", "1", "--seed", "3",
                   "--methods", ",".join(methods), "--no-evaluate", "--no-full", "--merge-workers", str(workers)])
    finally:
        torch.set_num_threads(before)
        if busy:
            stop.set()
            busy.join()
    assert rc == 0
    return {d.name: {f.name: f.read_bytes() for f in sorted(d.glob("*.safetensors"))}
            for d in sorted((Path(out) / "models").iterdir())}


def assert_same(one, many):
    assert one.keys() == many.keys() and one
    differ = [(mid, name) for mid in one for name in one[mid] if one[mid][name] != many[mid].get(name)]
    assert not differ, f"merged files that depend on the threads: {differ}"


def test_every_method_merges_the_same_bytes_on_any_threads_on_the_demo_family(tmp_path, monkeypatch):
    """The shipped ``demo`` pool on the quick family: each expert's own text and items."""
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    one = merged("demo", tmp_path / "one", SHIPPED, threads=1, workers=1, loaded=False, monkeypatch=monkeypatch)
    many = merged("demo", tmp_path / "many", SHIPPED, threads=4, workers=2, loaded=True, monkeypatch=monkeypatch)
    assert len(one) == len(SHIPPED)
    assert_same(one, many)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """Tensors above ATen's parallel grain (32768 elements): a reduction over one of them splits across threads."""
    root = tmp_path_factory.mktemp("llama256")
    base = make_tiny_model(root / "base", "llama", seed=0, vocab_size=512, hidden=256)
    return {"base": base, "experts": [make_tiny_model(root / f"e{i}", base=base, seed=i + 1, noise=0.02)
                                      for i in range(3)]}


def test_per_tensor_methods_merge_the_same_bytes_on_any_threads_on_a_tiny_llama(llama, tmp_path, monkeypatch):
    pool = write_pool(tmp_path, llama)
    methods = [m for m in SHIPPED if m not in DATA]
    one = merged(pool, tmp_path / "one", methods, threads=1, workers=1, loaded=False, monkeypatch=monkeypatch)
    two = merged(pool, tmp_path / "two", methods, threads=2, workers=1, loaded=False, monkeypatch=monkeypatch)
    many = merged(pool, tmp_path / "many", methods, threads=4, workers=2, loaded=True, monkeypatch=monkeypatch)
    assert_same(one, two)
    assert_same(one, many)
