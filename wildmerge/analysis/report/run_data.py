"""What a report reads from a run folder, read once and passed down: the plan, the manifest, each suite's index.

A report of several suites, its norms, cost section and model cards all need the plan; reading it once keeps them
consistent (a ``wildmerge sample`` adding methods mid-report cannot give two parts of one report two plans).
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

from wildmerge.errors import WildmergeError
from wildmerge.run import EvalIndex, Manifest, Plan, PlanEntry, RunFolder


@dataclass
class RunData:
    run: RunFolder
    plan: Plan
    manifest: Optional[Manifest]
    indexes: Dict[str, EvalIndex]  # evaluated suite -> its index (empty when damaged)
    entries: Dict[str, PlanEntry] = field(init=False)

    def __post_init__(self):
        self.entries = {e.model_id: e for e in self.plan.entries}

    @classmethod
    def read(cls, run_dir) -> "RunData":
        run = RunFolder(run_dir)
        plan = run.read_plan()  # first: a folder that is not a run gets that message
        return cls(run, plan, run.read_manifest(), {s: run.read_eval_index(s) for s in run.evaluated_suites()})

    @classmethod
    def of(cls, run) -> "RunData":
        """``run`` itself when it was read already, else the run folder at that path, read now."""
        return run if isinstance(run, cls) else cls.read(run)

    @property
    def root(self) -> Path:
        return self.run.root

    @property
    def suites(self):
        return sorted(self.indexes)

    def pick_suite(self, suite: Optional[str]) -> str:
        """``suite`` if it was evaluated, else the run's only evaluated suite; otherwise an error that says what to do."""
        root = self.root
        if suite:
            if suite not in self.indexes:
                raise WildmergeError(f"suite {suite!r} was not evaluated in {root} (evaluated: "
                                     f"{', '.join(self.suites) or 'none'}); run `wildmerge eval {root} --suite {suite}`")
            return suite
        if not self.indexes:
            raise WildmergeError(f"{root} has no evaluation results; run `wildmerge eval {root} --suite NAME`")
        if len(self.indexes) > 1:
            raise WildmergeError(f"{root} has results for several suites ({', '.join(self.suites)}): pick one with "
                                 f"--suite")
        return self.suites[0]
