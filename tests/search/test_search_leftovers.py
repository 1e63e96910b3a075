"""A search killed while it wrote a candidate leaves a temporary folder under search/models/; the rerun removes it,
and keeps the one a live search on the same folder is writing."""

from process_tree import killed_writer
from wildmerge.atomic import atomic_dir
from wildmerge.eval.suites import load_suite
from wildmerge.run import RunFolder
from wildmerge.search.live import LiveEvaluator


def test_the_rerun_removes_what_a_killed_search_was_writing(tmp_path):
    run = RunFolder(tmp_path)
    dead = killed_writer(run.search_model_dir("ta__x0-x1"))  # a real process, SIGKILLed mid-write
    with atomic_dir(run.search_model_dir("ta__x0-x2")) as live:  # another search, still writing
        LiveEvaluator(run, "unused", {}, {}, load_suite("demo"))  # the rerun's evaluator
        assert not dead.exists() and live.is_dir()
    assert sorted(p.name for p in run.search_models_dir.iterdir()) == ["ta__x0-x2"]
