"""Screened evaluation (``--screen FRACTION``): score every model on a fixed subset of items, finish only the
models whose Table 1 / Table 2 outcome is still open.

Stages, each a set of ordinary jobs (one atomic, checksummed result file per job, skipped when done, redone when
killed; ``parts.py`` scores a part):
  1. every model on the screening subset; the base and the experts (the references) also on the rest;
  2. each other model's paired bootstrap intervals (``screening.screen_model``) against the base and the best
     expert on the subset; where both exclude zero its outcome is decided and it stops;
  3. the undecided models on the rest.
Then each model gets a final record (a pure function of its parts, rewritten when it changes, so a rerun after a
kill or with a new reference decides again from what is on disk): its full score from both parts, or its screened
score, with the intervals and ``screening.stage`` = ``full`` or ``screened`` for the report.
"""

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from wildmerge.eval.jobs import job_id, job_identity, make_job
from wildmerge.eval.screening.parts import REST, SCREEN, combine, counted, item_vector, merge_parts
from wildmerge.eval.screening.stats import screen_model
from wildmerge.eval.store import FAILED, OK, ResultStore, base_record, needs_run, read_result, seal, write_result
from wildmerge.eval.suites import Suite

REFERENCES = ("base", "expert")
BOOTSTRAP = {"iters": 1000, "level": 0.95}
SCREEN_SEED = 0  # the items drawn for screening; part of every screened job's identity


def final_job_id(suite: Suite, fingerprint: str, fraction: float, seed: int) -> str:
    return job_id(suite, job_identity(fingerprint, suite, {"fraction": fraction, "seed": seed, "part": "final"}))


class Screening:
    """The jobs and decisions of one screened evaluation of a set of models (``models``: id -> (entry, fp))."""

    def __init__(self, models: Dict[str, Tuple[Any, str]], suite: Suite, include_path: Optional[str],
                 include_defaults: bool, store: ResultStore, fraction: float, seed: int = 0):
        self.models, self.suite, self.store = models, suite, store
        self.include = (include_path, include_defaults)
        self.fraction, self.seed = fraction, seed
        kinds: Dict[str, str] = {}
        for entry, fp in models.values():  # a checkpoint that is also a reference is scored as one
            kinds[fp] = "reference" if entry.kind in REFERENCES or kinds.get(fp) == "reference" else "candidate"
        self.kinds = kinds
        self.paths = {fp: entry.path for entry, fp in models.values()}
        self.base = next((fp for e, fp in models.values() if e.kind == "base"), None)
        self.experts = {e.model_id: fp for e, fp in models.values() if e.kind == "expert"}

    def job(self, fp: str, part: str) -> Dict[str, Any]:
        job = make_job(self.paths[fp], fp, self.suite, *self.include,
                       screen={"fraction": self.fraction, "seed": self.seed, "part": part}).to_dict()
        job["result_path"] = str(self.store.result_path(job["job_id"]))
        job["log_path"] = str(self.store.log_path(job["job_id"]))
        job["models"] = [m for m, (_, f) in self.models.items() if f == fp]
        return job

    def final_id(self, fp: str) -> str:
        return final_job_id(self.suite, fp, self.fraction, self.seed)

    def part(self, fp: str, part: str) -> Dict[str, Any]:
        return self.store.load(self.job(fp, part)["job_id"])

    def first_stage(self) -> List[Dict[str, Any]]:
        return ([self.job(fp, SCREEN) for fp in self.kinds]
                + [self.job(fp, REST) for fp, kind in self.kinds.items() if kind == "reference"])

    def _full(self, fp: str) -> Optional[Dict[str, Any]]:
        screen, rest = self.part(fp, SCREEN), self.part(fp, REST)
        if screen["status"] != OK or rest["status"] != OK:
            return None
        return merge_parts(screen["documents"], rest["documents"])

    def references(self) -> Tuple[Optional[Dict], Optional[str], Optional[Dict]]:
        """(base's screen documents, best expert's model id, its screen documents); None where not scored."""
        base = self.part(self.base, SCREEN) if self.base else None
        best_id, best_score = None, -np.inf
        for model_id, fp in sorted(self.experts.items()):
            full = self._full(fp)
            if full is not None:
                score = float(np.mean([combine(e) for e in full.values()]))
                if score > best_score:
                    best_id, best_score = model_id, score
        best = self.part(self.experts[best_id], SCREEN) if best_id else None
        ok = lambda r: r["documents"] if r and r["status"] == OK else None  # noqa: E731
        return ok(base), best_id, ok(best)

    def verdict(self, fp: str, refs) -> Optional[Dict[str, Any]]:
        """The candidate's screening verdict, or None when it or a reference has no screened score."""
        base, best_id, best = refs
        screen = self.part(fp, SCREEN)
        if self.kinds[fp] != "candidate" or screen["status"] != OK or base is None or best is None:
            return None
        docs = screen["documents"]
        if not _aligned(docs, base) or not _aligned(docs, best):
            return None
        vectors = [{label: np.asarray(item_vector(e), dtype=np.float64) for label, e in d.items()}
                   for d in (docs, base, best)]
        subset = {label: np.arange(len(v)) for label, v in vectors[0].items()}
        v = screen_model(*vectors, subset, seed=self.seed, **BOOTSTRAP)
        points = lambda t: [100 * x for x in t]  # noqa: E731
        return {"vs_base": points(v["vs_base"]), "vs_best": points(v["vs_best"]), "best_expert": best_id,
                "stopped": v["stop"]}

    def second_stage(self, verdicts: Dict[str, Optional[Dict]]) -> List[Dict[str, Any]]:
        return [self.job(fp, REST) for fp, kind in self.kinds.items()
                if kind == "candidate" and self.part(fp, SCREEN)["status"] == OK
                and not (verdicts.get(fp) or {}).get("stopped")]

    def final_record(self, fp: str, verdict: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        screen_job = self.job(fp, SCREEN)
        screen = self.store.load(screen_job["job_id"])
        stopped = bool(verdict and verdict["stopped"])
        parts = [screen] if stopped else [screen, self.part(fp, REST)]
        record = {**base_record(screen_job), "job_id": self.final_id(fp), "status": OK, "error": None,
                  "parts": [r.get("job_id") for r in parts], "worker": screen.get("worker"),
                  "device": screen.get("device"), "attempts": max(r.get("attempts", 1) for r in parts),
                  "seconds": sum(r.get("seconds") or 0.0 for r in parts),
                  "finished": max(r.get("finished") or 0.0 for r in parts)}
        bad = next((r for r in parts if r["status"] != OK), None)
        if bad is not None:
            which = "screening subset" if bad is screen else "remaining items"
            return {**record, "status": FAILED, "error": f"{which}: {bad.get('error')}", "killed": bad.get("killed")}
        documents = merge_parts(*(r["documents"] for r in parts))
        total = sum(d["n"] for e in documents.values() for d in e["leaves"].values())
        record.update(scores={label: combine(e) for label, e in documents.items()},
                      screening={"fraction": self.fraction, "seed": self.seed,
                                 "stage": "screened" if stopped else "full",
                                 "items_scored": sum(counted(e) for e in documents.values()), "items_total": total,
                                 **({k: verdict[k] for k in ("vs_base", "vs_best", "best_expert")} if verdict
                                    else {})})
        if not stopped:
            record["items"] = {label: item_vector(e) for label, e in documents.items()}
        return record

    def write_finals(self, verdicts: Dict[str, Optional[Dict]]) -> Dict[str, int]:
        """Write each model's final record where it changed; returns item evaluations of candidates."""
        spent = total = 0
        for fp in self.kinds:
            record = seal(self.final_record(fp, verdicts.get(fp)))
            path = self.store.result_path(record["job_id"])
            if read_result(path) != record:
                write_result(path, record)
            info = record.get("screening")
            if info and self.kinds[fp] == "candidate":
                spent, total = spent + info["items_scored"], total + info["items_total"]
        return {"spent": spent, "total": total}


def _aligned(a: Dict, b: Dict) -> bool:
    """Two parts scored the same documents (the paired comparison needs it)."""
    return a.keys() == b.keys() and all(
        {leaf: d["ids"] for leaf, d in a[k]["leaves"].items()} == {leaf: d["ids"] for leaf, d in b[k]["leaves"].items()}
        for k in a)


def run_screened(models: Dict[str, Tuple[Any, str]], suite: Suite, include_path, include_defaults: bool,
                 store: ResultStore, fraction: float, run: Callable[[List[Dict[str, Any]]], None],
                 retry_failed: bool = False, seed: int = 0) -> Dict[str, Any]:
    """The three stages for ``models`` (id -> (plan entry, fingerprint)); ``run(jobs)`` runs jobs on the executor.
    Returns the summary: model id -> final job id, stopped models, jobs run, item evaluations spent and total."""
    s = Screening(models, suite, include_path, include_defaults, store, fraction, seed)
    started = time.time()
    ran = _run_needed(s.first_stage(), store, run, retry_failed, "screening subset (and the references' rest)")
    refs = s.references()
    verdicts = {fp: s.verdict(fp, refs) for fp, kind in s.kinds.items() if kind == "candidate"}
    stopped = sum(bool(v and v["stopped"]) for v in verdicts.values())
    print(f"screening on {100 * fraction:g} % of the items: {stopped} of {len(verdicts)} model(s) decided "
          f"(best expert {refs[1]})")
    ran += _run_needed(s.second_stage(verdicts), store, run, retry_failed, "remaining items of undecided models")
    cost = s.write_finals(verdicts)
    if cost["total"]:
        print(f"screening saved {100 * (1 - cost['spent'] / cost['total']):.1f} % of the item evaluations of the "
              f"{len(verdicts)} non-reference model(s) ({time.time() - started:.0f} s)")
    return {"index": {m: s.final_id(fp) for m, (_, fp) in models.items()}, "stopped": stopped, "ran": ran, **cost,
            "jobs": {j["job_id"]: {k: v for k, v in j.items() if k != "tasks"}
                     for fp in s.kinds for j in (s.job(fp, SCREEN), s.job(fp, REST))}}


def _run_needed(jobs: List[Dict[str, Any]], store: ResultStore, run, retry_failed: bool, what: str) -> int:
    """Run the jobs that have no valid result (or a first kill, or a failure to retry); returns how many."""
    todo, seen = [], set()
    for job in jobs:
        if job["job_id"] in seen:
            continue
        seen.add(job["job_id"])
        status = store.load(job["job_id"])
        if needs_run(status, retry_failed):
            if status.get("killed") is not None:
                print(f"redoing {job['job_id']}: {status['error'].splitlines()[0]}")
            job["attempt"] = status.get("attempts", 1) + 1 if status["status"] == FAILED else 1
            todo.append(job)
    print(f"{what}: {len(seen)} job(s), {len(seen) - len(todo)} already done, {len(todo)} to run")
    if todo:
        run(todo)
    return len(todo)
