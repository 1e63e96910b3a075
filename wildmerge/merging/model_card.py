"""A merged model's ``README.md`` in the Hugging Face model-card format, ready for ``huggingface-cli upload``.

YAML front matter (``base_model`` with the pinned source checkpoints, ``tags``, and once evaluated a ``model-index``
with the scores) and a body with the recipe and the sources. The sampler writes it at merge time; the report
rewrites it with the scores after evaluation.
"""

from pathlib import Path
from typing import Dict, Optional

import yaml

from wildmerge.atomic import write_text
from wildmerge.run import PlanEntry, PoolModels

CARD = "README.md"
TOOL_NOTES = "## The merge tool's own card"  # mergekit's / the layer-wise driver's text (method and paper links)


def tool_notes(card_text: str) -> str:
    """What the merge tool wrote into README.md (front matter dropped), or what an earlier card kept of it."""
    if TOOL_NOTES in card_text:
        return card_text.split(TOOL_NOTES, 1)[1].strip()
    if card_text.startswith("---"):
        parts = card_text.split("---", 2)
        card_text = parts[2] if len(parts) == 3 else card_text
    return card_text.split("### Configuration", 1)[0].strip()  # mergekit repeats the recipe shown above


def _ref(model) -> str:
    """A source checkpoint as a hub id when it is one, else the reference as written in the pool."""
    return model.model


def _source_rows(entry: PlanEntry, models: PoolModels) -> list:
    experts = models.by_name()
    rows = [("base", models.base)] + [("expert", experts[name]) for name in entry.experts if name in experts]
    return [{"role": role, "name": m.name, "model": _ref(m), "kind": m.kind, "revision": m.revision or ""}
            for role, m in rows]


SOURCE = "wildmerge "  # + the suite name: the model-index source that tells one suite's results from another's


def render_card(entry: PlanEntry, models: PoolModels, recipe_text: str,
                evaluations: Optional[Dict[str, Dict[str, float]]] = None, run: str = "", notes: str = "") -> str:
    """The card's full text; ``evaluations`` are suite -> task -> accuracy in [0, 1] (lm-eval's fractions)."""
    evaluations = {suite: scores for suite, scores in (evaluations or {}).items() if scores}
    sources = _source_rows(entry, models)
    hub = [s["model"] for s in sources if s["kind"] == "hub"]
    meta = {"library_name": "transformers", "tags": ["merge", "mergekit", "wildmerge", entry.method or "merge"]}
    if hub:
        meta["base_model"] = hub  # the Hub links a merge to its parents through these two fields
        meta["base_model_relation"] = "merge"
    if evaluations:
        meta["model-index"] = [{"name": entry.model_id, "results": [
            {"task": {"type": "text-generation", "name": "Text Generation"},
             "dataset": {"name": task, "type": task},
             "metrics": [{"type": "accuracy", "value": round(float(value), 6), "name": "accuracy"}],
             "source": {"name": SOURCE + suite, "url": ""}}
            for suite, scores in evaluations.items() for task, value in scores.items()]}]
    lines = ["---", yaml.safe_dump(meta, sort_keys=False).rstrip(), "---", "",
             f"# {entry.model_id}", "",
             f"A merge of {len(entry.experts)} fine-tuned checkpoint(s) of one base model with **{entry.label}**"
             f" (subset `{entry.subset_id}`, n = {entry.n}), made by wildmerge"
             + (f" in run `{run}`" if run else "") + " through mergekit.", "",
             "## Source checkpoints", "", "| role | name | checkpoint | revision |", "|---|---|---|---|"]
    for s in sources:
        revision = f"`{s['revision']}`" if s["revision"] else "local (no hub revision)"
        lines.append(f"| {s['role']} | {s['name']} | `{s['model']}` | {revision} |")
    lines += ["", "## Hyperparameters", "", "| parameter | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(entry.hparams.items())]
    for suite, scores in evaluations.items():
        lines += ["", f"## Evaluation: suite `{suite}`", "", "lm-eval accuracy, in percent.", "",
                  "| task | accuracy (%) |", "|---|---|"]
        lines += [f"| {t} | {100 * float(v):.2f} |" for t, v in scores.items()]
        lines += [f"| **mean** | **{100 * sum(scores.values()) / len(scores):.2f}** |"]
    lines += ["", "## Recipe", "", "Run it again with `mergekit-yaml recipe.yml OUT/` (wildmerge installed, so its "
              "methods are registered):", "", "```yaml", recipe_text.rstrip(), "```", ""]
    if notes:
        lines += [TOOL_NOTES, "", notes, ""]
    return "\n".join(lines)


def card_evaluations(card_text: str) -> Dict[str, Dict[str, float]]:
    """suite -> task -> accuracy from a card's model-index (what earlier reports of other suites wrote)."""
    try:
        meta = yaml.safe_load(card_text.split("---", 2)[1]) if card_text.startswith("---") else {}
    except (yaml.YAMLError, IndexError):
        return {}
    out: Dict[str, Dict[str, float]] = {}
    for index in (meta or {}).get("model-index") or []:
        for r in index.get("results", []):
            source = (r.get("source") or {}).get("name", "")
            if source.startswith(SOURCE) and r.get("metrics"):
                out.setdefault(source[len(SOURCE):], {})[r["dataset"]["name"]] = r["metrics"][0]["value"]
    return out


def write_card(folder, entry: PlanEntry, models: PoolModels, recipe_text: str,
               scores: Optional[Dict[str, float]] = None, suite: str = "", run: str = "") -> Path:
    """(Re)write the card with ``suite``'s scores, keeping the merge tool's own text and other suites' scores."""
    path = Path(folder) / CARD
    old = path.read_text() if path.is_file() else ""
    evaluations = card_evaluations(old)
    if scores:
        evaluations[suite] = scores
    return write_text(path, render_card(entry, models, recipe_text, evaluations, run=run,
                                        notes=tool_notes(old) if old else ""))
