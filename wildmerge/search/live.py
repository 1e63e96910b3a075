"""The search's evaluator on real models: merge a candidate once, score it on a fraction of the suite's items.

A candidate (method with its TAS-tuned hyperparameters, subset of experts) is merged in memory by the recipe's own
mergekit method (``merging.inmemory.CandidateMerger``, base and experts loaded once) and written once as a
checkpoint in the run's search folder (``RunFolder.search_model_dir``); RegMean and Chain of Merges, which read
each expert's data layer by layer, are merged there through the runs' own mergekit path instead. Every rung
scores it through the evaluation harness as a screening part (lm-eval ``samples=``: the first ``fraction`` of a seeded permutation of each task's
documents, so the rungs' subsets are nested and every model sees the same items). Results live in the search's
result store (``RunFolder.search_eval_dir``): a rerun after a kill finds them and scores nothing twice, and removes the candidate folder the killed search
was writing.
"""

import copy
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from wildmerge.atomic import atomic_dir, clean_stale_tmp
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.screening.parts import SCREEN, counted, item_vector
from wildmerge.eval.screening.stats import Items
from wildmerge.eval.fingerprint import FingerprintCache
from wildmerge.eval.store import OK
from wildmerge.errors import WildmergeError
from wildmerge.run import RunFolder


RECIPE_STAMP = "search_recipe.json"  # written last into a candidate's folder: the recipe it was merged from


class LiveEvaluator:
    """``evaluate([candidate ids or "base"], fraction)`` for ``bandit.search``: one executor call per rung."""

    def __init__(self, run: RunFolder, base_path: str, experts: Dict[str, str], candidates: Dict[str, dict], suite,
                 seed: int = 0, options: Optional[EvalOptions] = None, merge_device: str = "cpu",
                 pool_models=None, methods: Optional[dict] = None):
        from wildmerge.eval.store import ResultStore

        self.run, self.base_path, self.experts = run, base_path, experts
        self.pool_models, self.methods = pool_models, methods or {}  # for RegMean / CoM (mergekit, experts' data)
        self.candidates, self.suite, self.seed, self.merge_device = candidates, suite, seed, merge_device
        self.options = options or EvalOptions(workers=1)  # one worker: a rung's few models, each loaded once
        self.store = ResultStore(run.search_eval_dir(suite.name)).prepare()
        self._merger = self._model = None  # loaded on the first merge: a resumed search may need none
        self.fingerprints = FingerprintCache(self.store.fingerprints_file)
        clean_stale_tmp(run.search_models_dir)  # what a killed search was writing (a live one's stays)

    def model_path(self, candidate: str) -> str:
        if candidate == "base":
            return self.base_path
        if self.candidates[candidate]["recipe"] is None:  # an expert alone: scored as it is
            return self.experts[self.candidates[candidate]["experts"][0]]
        path = self.run.search_model_dir(candidate)
        if is_layerwise(self.candidates[candidate]["recipe"]):
            self._merge_layerwise(candidate, path)
            return str(path)
        recipe = json.dumps(self.candidates[candidate]["recipe"], sort_keys=True)
        stamp = path / RECIPE_STAMP
        if not stamp.is_file() or stamp.read_text() != recipe:  # absent, or merged from other settings
            self._write(candidate, path, recipe)
        return str(path)

    def _write(self, candidate: str, path: Path, recipe_text: str) -> None:
        """Merge in memory, load into one model object, save it with the base's tokenizer (complete or absent)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from wildmerge.merging.inmemory import CandidateMerger

        if self._merger is None:
            self._merger = CandidateMerger(self.base_path, self.experts, device=self.merge_device)
            self._model = AutoModelForCausalLM.from_pretrained(self.base_path, dtype=torch.float32).eval()
        spec = self.candidates[candidate]
        merger = copy.copy(self._merger)
        merger.expert_names = list(spec["recipe"]["models_order"])
        recipe = {k: v for k, v in spec["recipe"].items() if k != "models_order"}
        self._model.load_state_dict(merger.merge(recipe), strict=False)
        with atomic_dir(path) as tmp:
            self._model.save_pretrained(tmp)
            AutoTokenizer.from_pretrained(self.base_path).save_pretrained(tmp)
            (Path(tmp) / RECIPE_STAMP).write_text(recipe_text)

    def _merge_layerwise(self, candidate: str, path: Path) -> None:
        """RegMean / Chain of Merges read each expert's data layer by layer: not merged in memory but through the
        runs' own mergekit path (``merging.runner.run_plan``) into the candidate's folder, done once (a folder whose
        ``merge_info.json`` records the same recipe is reused, also after a kill)."""
        from wildmerge.merging.runner import merge_options, run_plan
        from wildmerge.run import PlanEntry

        spec = self.candidates[candidate]
        if self.pool_models is None or spec["method"] not in self.methods:
            raise WildmergeError(f"{candidate}: {spec['method']} merges through mergekit with each expert's data; "
                                 "give the evaluator the pool's models and the method's recipe")
        entry = PlanEntry(model_id=candidate, kind="merge", path=str(path), method=spec["method"],
                          n=len(spec["experts"]), experts=list(spec["experts"]))
        run_plan([entry], self.pool_models, {spec["method"]: self.methods[spec["method"]]},
                 merge_options(self.pool_models, device=self.merge_device), progress=False)

    def job(self, candidate: str, fraction: float) -> dict:
        from wildmerge.eval.fingerprint import fingerprint_model
        from wildmerge.eval.jobs import make_job
        from wildmerge.eval.suites import check_tasks

        path = self.model_path(candidate)
        job = make_job(path, fingerprint_model(path, self.fingerprints), self.suite, self.suite.resolved_include_path(),
                       check_tasks(self.suite), screen={"fraction": fraction, "seed": self.seed, "part": SCREEN})
        job = job.to_dict()
        job["result_path"] = str(self.store.result_path(job["job_id"]))
        job["log_path"] = str(self.store.log_path(job["job_id"]))
        job["models"] = [candidate]
        return job

    def evaluate(self, candidates: List[str], fraction: float) -> Dict[str, Tuple[Items, int]]:
        """Each candidate's item scores on the fraction's items, and what they cost (found on disk or not)."""
        from wildmerge.eval.executors import run_jobs

        jobs = {c: self.job(c, fraction) for c in candidates}
        self.fingerprints.save()
        todo = [j for j in jobs.values() if self.store.load(j["job_id"])["status"] != OK]
        if todo:
            run_jobs(todo, self.options)
        out = {}
        for c, job in jobs.items():
            record = self.store.load(job["job_id"])
            if record["status"] != OK:
                raise WildmergeError(f"scoring {c} on {fraction:g} of the items failed: "
                                     f"{(record.get('error') or 'no result').splitlines()[0]}; see {self.store.root}")
            docs = record["documents"]
            out[c] = ({label: np.asarray(item_vector(e), dtype=np.float64) for label, e in sorted(docs.items())},
                      sum(counted(e) for e in docs.values()))
        return out


def is_layerwise(recipe: dict) -> bool:
    """A RegMean / Chain of Merges recipe (each expert's data, merged by mergekit rather than in memory)."""
    from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS

    return recipe["merge_method"] in LAYERWISE_METHODS


def subset_recipe(method, base: str, subset: List[str], expert_paths: Dict[str, str]) -> dict:
    """The mergekit recipe of ``method`` on ``subset`` (models named by expert, for the in-memory merger)."""
    from wildmerge.recipes.render import render_recipe

    recipe = render_recipe(method, "base", list(subset))
    recipe.pop("out_dtype", None)
    recipe["models_order"] = list(subset)
    return recipe
