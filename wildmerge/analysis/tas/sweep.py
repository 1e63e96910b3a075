"""A TAS sweep: score every grid point of one method by its task alignment, with no checkpoint written.

Base and experts are loaded once (``merging.inmemory.CandidateMerger``); each expert's own features on its own
unlabelled data are computed once and cached on disk; each candidate is merged in memory, loaded into one model
object, run over every expert's data and scored (``analysis.alignment``). One JSON record per candidate makes a
rerun resume where it stopped. The reality-check paper, Section 3.2: pick ``argmin TAS``.
"""

import hashlib
import json
import time
from pathlib import Path
from typing import Dict, List

from wildmerge.analysis.tas.score import DISTANCES, features, mean_over_experts, task_alignment
from wildmerge.atomic import write_json, write_text
from wildmerge.checkpoints import weights_bytes
from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.resources import free_device_memory

DEFAULT_SAMPLES = 128  # the paper's default per task
FEATURES_SECONDS = "seconds.json"  # beside an expert-features cache: what computing it took


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def candidate_id(point: dict) -> str:
    from wildmerge.recipes.method import merge_id

    return merge_id("c", "tas", point).split("__", 2)[-1] if point else "defaults"


def check_points(method, points: List[dict], grid_name: str) -> None:
    """An empty grid or a key the method does not take fails here, before anything is loaded."""
    from wildmerge.recipes.method import check_hparams

    if not points:
        raise ConfigError(f"grid {grid_name!r} is empty: give each hyperparameter at least one value")
    for point in points:
        if not point:
            raise ConfigError(f"grid {grid_name!r} has no hyperparameter: give e.g. {{lambda: [0.5, 1.0]}}")
        check_hparams(method, point)


def check_fits(paths: List[str], device: str) -> None:
    """Base + experts + one working model must fit the device's free memory (checked before loading anything)."""
    need = sum(weights_bytes(p) for p in paths) + 2 * weights_bytes(paths[0])
    free = free_device_memory(device)
    if free is not None and need > free:
        raise ConfigError(f"the sweep holds the base, {len(paths) - 1} experts and a working model in memory: about "
                          f"{need / 2**30:.1f} GiB, but {device} has {free / 2**30:.1f} GiB free; use fewer experts, "
                          f"a device with more memory (--device cuda) or merge and evaluate instead")


class TASSweep:
    """Everything loaded once for one pool: merger, working model, calibration batches, expert features."""

    def __init__(self, out_dir, base_path: str, experts: Dict[str, str], batches: Dict[str, list],
                 device: str = "cpu", data_key: str = ""):
        import torch
        from transformers import AutoModelForCausalLM

        from wildmerge.merging.inmemory import CandidateMerger

        self.out = Path(out_dir)
        self.base_path, self.expert_paths, self.batches = base_path, experts, batches
        self.merger = CandidateMerger(base_path, experts, device=device)
        self.model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).to(device).eval()
        self.data_key = data_key
        self.expert_feats = self._expert_features()

    def _load(self, tensors: dict) -> None:
        result = self.model.load_state_dict(tensors, strict=False)
        if result.unexpected_keys:
            raise WildmergeError(f"the checkpoint holds tensors the model does not: {result.unexpected_keys[:3]}")

    def _expert_features(self) -> Dict[str, list]:
        """f(x; theta_t) on D_t for every expert, cached in ``expert_features.pt`` (keyed by models and data)."""
        import torch

        from wildmerge.atomic import atomic_dir

        key = _hash({"experts": self.expert_paths, "base": self.base_path, "data": self.data_key})
        cache = self.out / "expert_features" / key
        if (cache / "features.pt").is_file():
            return torch.load(cache / "features.pt")
        feats = {}
        start = time.perf_counter()
        for name in self.expert_paths:
            self._load({**self.merger.base, **self.merger.experts[name]})
            feats[name] = features(self.model, self.batches[name])
        with atomic_dir(cache) as tmp:
            torch.save(feats, Path(tmp) / "features.pt")
            write_json(Path(tmp) / FEATURES_SECONDS, {"seconds": round(time.perf_counter() - start, 3)})
        return feats

    def score(self, recipe: dict) -> Dict[str, Dict[str, float]]:
        """{expert: {distance: TAS_t}} of one candidate recipe (models named by expert)."""
        self._load(self.merger.merge(recipe))
        return {name: task_alignment(features(self.model, self.batches[name]), self.expert_feats[name])
                for name in self.expert_paths}

    def merged_state(self, recipe: dict) -> dict:
        return self.merger.merge(recipe)


def sweep(tas: TASSweep, method, points: List[dict], out_dir, progress: bool = True) -> List[dict]:
    """Score every point (resumable: a candidate whose record matches is not scored again); returns the records."""
    from tqdm.auto import tqdm

    from wildmerge.recipes.render import render_recipe

    out = Path(out_dir)
    names = list(tas.expert_paths)
    records = []
    for point in tqdm(points, desc=f"TAS {method.name}", unit="candidate", disable=not progress):
        recipe = render_recipe(method, "base", names, point)
        recipe.pop("out_dtype", None)
        key = _hash({"recipe": recipe, "data": tas.data_key, "experts": tas.expert_paths})
        path = out / "candidates" / f"{candidate_id(point)}.json"
        if path.is_file():
            record = json.loads(path.read_text())
            if record.get("key") == key:
                records.append(record)
                continue
        start = time.perf_counter()
        per_expert = tas.score(recipe)
        record = {"candidate": candidate_id(point), "hparams": point, "key": key, "per_expert": per_expert,
                  "tas": mean_over_experts(per_expert), "seconds": round(time.perf_counter() - start, 3)}
        write_json(path, record)
        records.append(record)
    return records


def recorded_cost(out_dir) -> dict:
    """What the TAS sweeps under ``out_dir`` recorded (``wildmerge sample --tune`` writes one folder per method
    under the run's tune folder): {method: (candidates scored, their seconds)} and, under ``None``, the experts'
    features computed once for all methods (folders without a record count nothing)."""
    out = Path(out_dir)
    cost = {}
    for folder in sorted(p for p in out.iterdir() if (p / "candidates").is_dir()) if out.is_dir() else []:
        records = [json.loads(f.read_text()) for f in sorted((folder / "candidates").glob("*.json"))]
        cost[folder.name] = (len(records), sum(float(r.get("seconds") or 0.0) for r in records))
    timed = [json.loads(f.read_text()) for f in sorted(out.glob(f"expert_features/*/{FEATURES_SECONDS}"))]
    if timed:
        cost[None] = (len(timed), sum(float(t["seconds"]) for t in timed))
    return cost


def write_tas_csv(records: List[dict], path) -> Path:
    """One row per candidate x expert (plus the mean over experts), one column per distance."""
    keys = sorted({k for r in records for k in r["hparams"]})
    lines = [",".join(["candidate", *keys, "expert", *DISTANCES])]
    for r in records:
        rows = [*r["per_expert"].items(), ("mean", r["tas"])]
        for expert, d in rows:
            lines.append(",".join([r["candidate"], *(str(r["hparams"].get(k, "")) for k in keys), expert,
                                   *(f"{d[k]:.8g}" for k in DISTANCES)]))
    return write_text(path, "\n".join(lines) + "\n")


def select(records: List[dict], distance: str = "l2") -> dict:
    """The candidate with the lowest mean TAS under ``distance``."""
    if distance not in DISTANCES:
        raise ConfigError(f"unknown distance {distance!r}; valid: {', '.join(DISTANCES)}")
    return min(records, key=lambda r: r["tas"][distance])
