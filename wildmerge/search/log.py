"""The search's decision log, ``search_log.jsonl``: one line per rung, rewritten from the first line that changes.

A rerun after a kill replays the rungs from the scores already on disk; each rung it reaches again is compared with
the logged one and left alone when equal, so the log of a resumed search reads as if it had never stopped.
"""

import json
from pathlib import Path

from wildmerge.atomic import write_text


class SearchLog:
    def __init__(self, path):
        self.path = Path(path)
        self.lines = self.path.read_text().splitlines() if self.path.is_file() else []

    def __call__(self, record: dict) -> None:
        line = json.dumps(record, sort_keys=True, default=float)
        rung = record["rung"]
        if rung < len(self.lines) and self.lines[rung] == line:
            return
        self.lines = self.lines[:rung] + [line]
        write_text(self.path, "\n".join(self.lines) + "\n")

    def records(self) -> list:
        return [json.loads(line) for line in self.lines]
