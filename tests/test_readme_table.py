"""CI's check of the README's Table 1 (scripts/check_readme_table.py): the README's table is found, a run whose table
equals it passes, and a run that differs in one cell fails naming that cell."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_readme_table.py"
sys.path.insert(0, str(SCRIPT.parent))

from check_readme_table import differences, first_method_table  # noqa: E402


def readme_table() -> list:
    return first_method_table((ROOT / "README.md").read_text())


def as_markdown(rows: list) -> str:
    """The table as pandas writes it in leaderboard.md (padded cells, aligned separator)."""
    lines = ["| " + " | ".join(f"{c:<12}" for c in rows[0]) + " |", "|" + "|".join(":---" for _ in rows[0]) + "|"]
    lines += ["| " + " | ".join(f"{c:<12}" for c in r) + " |" for r in rows[1:]]
    return "# Leaderboard\n\n## Table 1\n\n" + "\n".join(lines) + "\n\nAfter the table.\n"


def check(run: Path):
    return subprocess.run([sys.executable, str(SCRIPT), "--run", str(run)], capture_output=True, text=True)


def test_the_readme_holds_table_1_of_the_seven_methods():
    rows = readme_table()
    assert rows[0][:2] == ["Method", "Base"] and len(rows) == 8
    assert [r[0] for r in rows[1:]] == ["TA", "Model Stock", "TIES", "TA+SB", "TIES+SB", "TSV-M", "Iso-C"]


def test_a_run_with_the_readmes_table_passes_and_one_cell_off_fails_naming_it(tmp_path):
    rows = readme_table()
    (tmp_path / "report").mkdir()
    board = tmp_path / "report" / "leaderboard.md"
    board.write_text(as_markdown(rows))
    ok = check(tmp_path)
    assert ok.returncode == 0 and "is the README's (7 methods" in ok.stdout

    changed = [list(r) for r in rows]
    changed[3][4] = "0 / -9.99"  # TIES at the fourth column
    board.write_text(as_markdown(changed))
    bad = check(tmp_path)
    assert bad.returncode == 1
    assert f"TIES / {rows[0][4]}: README {rows[3][4]}, run 0 / -9.99" in bad.stderr
    assert "differs from the README's in 1 cell(s)" in bad.stderr


def test_missing_tables_and_rows_are_named():
    rows = readme_table()
    assert differences(rows, []) == ["no Table 1 found in the run's leaderboard.md"]
    assert differences(rows, rows[:-1]) == ["Iso-C: not in the run's table"]
