"""Temporary siblings record their writer: a later run removes what a killed writer left and keeps what a live one
is still writing (real processes)."""

from process_tree import killed_writer
from wildmerge.atomic import atomic_dir, clean_stale_tmp, writer_alive


def test_a_dead_writers_folder_is_removed_and_a_live_ones_kept(tmp_path):
    dead = killed_writer(tmp_path / "a")
    assert not writer_alive(dead.name)
    legacy = tmp_path / ".b.tmp-k3j9x0ab"  # written before names recorded their writer
    legacy.mkdir()
    with atomic_dir(tmp_path / "c") as live:
        assert writer_alive(live.name)
        other_host = tmp_path / ".d.tmp-99999999-00000000-x1"  # another machine's writer: unknowable, kept
        other_host.mkdir()
        assert clean_stale_tmp(tmp_path) == 2
        assert not dead.exists() and not legacy.exists() and live.is_dir() and other_host.is_dir()
    assert (tmp_path / "c").is_dir() and not live.exists()

