"""The check a newcomer makes: run the main job on the default demo family and compare its Table 1 with the
README's, cell by cell. CI runs it on whichever host CI runs; it exits 1 naming every cell that differs.

    python scripts/check_readme_table.py                 # runs `python sample_and_merge.py --out RUN` first
    python scripts/check_readme_table.py --run runs/demo-seed0   # compares a finished run
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def first_method_table(text: str) -> list:
    """The rows (lists of stripped cells) of the first markdown table whose header starts with ``Method``."""
    rows, inside = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if cells is None:
            if inside:
                break
            continue
        if not inside and cells[0] != "Method":
            continue
        inside = True
        if not all(set(c) <= set(":-") for c in cells):  # the separator row
            rows.append(cells)
    return rows


def differences(readme: list, run: list) -> list:
    """Every cell that differs, as ``row / column: README x, run y``; rows and columns named by their labels."""
    if not readme or not run:
        return ["no Table 1 found in " + ("the README" if not readme else "the run's leaderboard.md")]
    out = []
    if readme[0] != run[0]:
        out.append(f"header: README {readme[0]}, run {run[0]}")
    theirs = {r[0]: r for r in run[1:]}
    for row in readme[1:]:
        other = theirs.get(row[0])
        if other is None:
            out.append(f"{row[0]}: not in the run's table")
            continue
        out += [f"{row[0]} / {col}: README {a}, run {b}" for col, a, b in zip(readme[0][1:], row[1:], other[1:])
                if a != b]
    out += [f"{name}: in the run's table, not in the README" for name in theirs.keys() - {r[0] for r in readme}]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, help="a finished run folder of the main job (default: run it now)")
    args = ap.parse_args()
    run = args.run
    if run is None:
        run = Path(tempfile.mkdtemp(prefix="readme-table-")) / "demo-seed0"
        proc = subprocess.run([sys.executable, str(ROOT / "sample_and_merge.py"), "--out", str(run)], cwd=ROOT)
        if proc.returncode != 0:
            print(f"the main job failed (exit {proc.returncode})", file=sys.stderr)
            return 1
    board = run / "report" / "leaderboard.md"
    readme = first_method_table((ROOT / "README.md").read_text())
    found = first_method_table(board.read_text()) if board.is_file() else []
    diffs = differences(readme, found)
    if diffs:
        print(f"Table 1 of {board} differs from the README's in {len(diffs)} cell(s):", file=sys.stderr)
        for line in diffs:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"Table 1 of {board} is the README's ({len(readme) - 1} methods x {len(readme[0]) - 1} columns)")
    if args.run is None:  # the run this check made: nothing left behind (a failing one stays, to be looked at)
        shutil.rmtree(run.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
