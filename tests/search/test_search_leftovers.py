"""A search killed while it wrote a candidate leaves a temporary folder under search/models/; the rerun removes it
(issue 34, case 11), and keeps the one a live search on the same folder is writing."""

from process_tree import killed_writer
from wildmerge.atomic import atomic_dir
from wildmerge.eval.suites import load_suite
from wildmerge.search.live import LiveEvaluator


def test_the_rerun_removes_what_a_killed_search_was_writing(tmp_path):
    folder = tmp_path / "search"
    dead = killed_writer(folder / "models" / "ta__x0-x1")  # a real process, SIGKILLed mid-write
    with atomic_dir(folder / "models" / "ta__x0-x2") as live:  # another search, still writing
        LiveEvaluator(folder, "unused", {}, {}, load_suite("demo"))  # the rerun's evaluator
        assert not dead.exists() and live.is_dir()
    assert sorted(p.name for p in (folder / "models").iterdir()) == ["ta__x0-x2"]
