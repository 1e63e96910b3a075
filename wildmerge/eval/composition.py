"""Composition baselines of the fresh-head probe paper as models lm-eval can score: output averaging and the centroid-routed composer.

Neither is a merge: both keep every expert and run them at inference, so they show what merging gives up.

- **Ensemble** (Sec. 3.2): the plain mean of the experts' next-token logits, z = (1/T) sum_t z_t, no masking.
- **Composer** (App. C.2): a routing model r (the pool's base, frozen) embeds the context's last token;
  c_t = mean of r over expert t's own inputs, fixed before evaluation; per input, the top-k experts by cosine
  similarity (k = 3) get weights softmax(s / tau) (tau = 1) and z = sum_{t in top-k} w_t z_t. The paper masks each
  expert to its own classes; an LLM expert covers the whole vocabulary, so every mask is all ones here.

A composition is a folder with ``composition.json`` (and ``centroids.safetensors`` for the composer);
``lm_eval``'s model registry knows it as ``wildmerge-composition`` (``composition_lm.py``, imported only to score one). Routing is decided once per request, from the
context alone, so every choice of a multiple-choice item is scored by the same mixture of experts.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from wildmerge.atomic import atomic_dir
from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.run import generated_calibration_dir

COMPOSITION_FILE, CENTROIDS_FILE = "composition.json", "centroids.safetensors"
MODEL_NAME = "wildmerge-composition"


class CompositionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["ensemble", "composer"]
    experts: Dict[str, str] = Field(min_length=1)  # name -> model folder
    router: Optional[str] = None  # composer: the routing model (the pool's base)
    top_k: int = Field(default=3, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    # composer: name -> that expert's data (a file path, or its ``data:`` as a run manifest keeps it)
    calibration: Dict[str, Any] = Field(default_factory=dict)


def is_composition(path) -> bool:
    return (Path(path) / COMPOSITION_FILE).is_file()


def read_spec(path) -> CompositionSpec:
    try:
        return CompositionSpec.model_validate(json.loads((Path(path) / COMPOSITION_FILE).read_text()))
    except (OSError, ValueError) as exc:
        raise WildmergeError(f"{path}/{COMPOSITION_FILE} is unreadable or invalid ({exc}); write it again with "
                             f"write_composition") from None


def route(query, centroids, top_k: int, temperature: float):
    """(indices (B, k), weights (B, k)): top-k experts by cosine similarity and their softmax(s / tau) weights."""
    import torch

    q = torch.nn.functional.normalize(query.float(), dim=-1)
    c = torch.nn.functional.normalize(centroids.float(), dim=-1)
    top_s, top_i = (q @ c.T).topk(min(top_k, len(centroids)), dim=-1)
    return top_i, torch.softmax(top_s / temperature, dim=-1)


def mixing_weights(kind: str, n_experts: int, query=None, centroids=None, top_k=3, temperature=1.0):
    """(B, T) weight of each expert's logits for each input (zeros for experts the composer did not select)."""
    import torch

    if kind == "ensemble":
        return torch.full((len(query), n_experts), 1.0 / n_experts)
    idx, w = route(query, centroids, top_k, temperature)
    return torch.zeros(len(query), n_experts).scatter_(1, idx, w)


def _read_prompts(name: str, data, model_path: str, generated_dir) -> List[str]:
    """The expert's unlabelled inputs, read through wildmerge.expert_data (every source kind works)."""
    from wildmerge.expert_data.read import expert_texts
    from wildmerge.expert_data.schema import parse_data

    texts = expert_texts(parse_data(data, f"data of {name!r}"), name, model_path=model_path,
                         generated_dir=generated_dir)
    return [t for t in texts if isinstance(t, str)]


def write_composition(folder, spec: CompositionSpec, device: str = "cpu") -> Path:
    """Write a composition folder; the composer's centroids are computed here, once, before any evaluation."""
    from safetensors.torch import save_file

    if spec.kind == "composer":
        missing = sorted(set(spec.experts) - set(spec.calibration))
        if spec.router is None or missing:
            raise ConfigError(f"the composer needs a router model and inputs of every expert for its centroids; "
                              f"missing: {'router' if spec.router is None else ''} {missing}".strip())
    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / COMPOSITION_FILE).write_text(json.dumps(spec.model_dump(), indent=1))
        if spec.kind == "composer":
            import torch

            from wildmerge.eval.features import last_token_features, load_causal_lm

            router, tok = load_causal_lm(spec.router, device)
            generated = generated_calibration_dir(folder)  # RUN/calibration for RUN/models/<id>
            centroids = torch.stack([last_token_features(router, tok, _read_prompts(
                n, spec.calibration[n], spec.experts[n], generated)).mean(0) for n in spec.experts])
            save_file({"centroids": centroids.contiguous()}, str(tmp / CENTROIDS_FILE))
    return folder


def add_compositions(run_dir, kinds=("ensemble", "composer"), calibration: Optional[Dict[str, str]] = None,
                     min_n: int = 2, device: str = "cpu") -> List[str]:
    """Add an ensemble and / or a composer of every drawn subset (n >= ``min_n``) to a run's plan, next to its
    merges; returns their model ids. The composer routes with the pool's base; its centroids come from each
    expert's ``calibration`` JSONL (the pool's ``calibration:`` field, or ``calibration`` {expert: path})."""
    from tqdm.auto import tqdm

    from wildmerge.run import Plan, PlanEntry, RunFolder

    run = RunFolder(run_dir)
    plan, manifest = run.read_plan(), run.read_manifest()
    if manifest is None:
        raise WildmergeError(f"{run.root} has no manifest.json: compositions are built from the run's drawn subsets")
    experts = manifest.models.by_name()
    data = {name: (calibration or {}).get(name) or e.calibration for name, e in experts.items()}
    entries, added = {e.model_id: e for e in plan.entries}, []
    subsets = [s for s in manifest.subsets if s.n >= min_n]
    if "composer" in kinds:
        from wildmerge.expert_data.check import require_data
        from wildmerge.expert_data.schema import parse_data

        used = sorted({n for s in subsets for n in s.experts})
        require_data({n: parse_data(data.get(n), f"data of {n!r}") for n in used}, ["composer"], manifest.pool)
    for subset in tqdm(subsets, desc="compositions", unit="subset"):
        for kind in kinds:
            model_id = f"{kind}__{subset.subset_id}"
            folder = run.model_dir(model_id)
            spec = CompositionSpec(kind=kind, experts={n: experts[n].path for n in subset.experts},
                                   router=manifest.models.base.path if kind == "composer" else None,
                                   calibration={n: data[n] for n in subset.experts} if kind == "composer" else {})
            if not (is_composition(folder) and read_spec(folder) == spec):
                write_composition(folder, spec, device)
            entries[model_id] = PlanEntry(model_id=model_id, kind="composition", method=kind, path=str(folder),
                                          n=subset.n, subset_id=subset.subset_id, experts=list(subset.experts),
                                          label=kind, domain=subset.domain)
            added.append(model_id)
    run.write_plan(plan.model_copy(update={"entries": list(entries.values())}))
    return added
