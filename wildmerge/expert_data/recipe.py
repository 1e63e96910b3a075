"""An expert's data in the forms other records carry it: a run manifest's entry and a mergekit recipe's
``calibration:`` entry (which stock ``mergekit-yaml`` runs through our RegMean / CoM plugin)."""

from pathlib import Path
from typing import Optional

from wildmerge.expert_data.read import local_path
from wildmerge.expert_data.schema import ExpertData, Source

# recipe keys (plugins/layerwise/calibration.py) <- Source fields
_RECIPE_KEYS = {"field": "text_field", "n": "n_samples", "prompt": "prompt_field", "answer": "answer_field"}


def text_source(data: Optional[ExpertData]) -> Optional[Source]:
    """The unlabelled text to use: the text part, else the labelled items read as prompt + answer."""
    if data is None:
        return None
    if data.text is not None or data.labelled is None:
        return data.text
    lab = data.labelled
    p, a = lab.prompt or "prompt", lab.answer or "answer"
    template = ("" if "{" in p else "{") + p + ("" if "{" in p else "}") + " " + \
               ("" if "{" in a else "{") + a + ("" if "{" in a else "}")
    return lab.model_copy(update={"template": template, "prompt": None, "answer": None, "field": None})


def absolute(data: Optional[ExpertData], relative_to) -> Optional[ExpertData]:
    """Local file paths made absolute against the pool file's folder (a manifest outlives the working folder)."""
    if data is None or relative_to is None:
        return data

    def fix(s: Optional[Source]) -> Optional[Source]:
        if s is None or s.kind != "file":
            return s
        return s.model_copy(update={"file": str(local_path(s, relative_to))})

    return ExpertData(text=fix(data.text), labelled=fix(data.labelled))


def to_record(data: Optional[ExpertData]):
    """The JSON form a run manifest keeps (read back with ``schema.parse_data``)."""
    return None if data is None else data.model_dump(exclude_none=True)


def materialise(source: Source, *, model_path, expert: str, generated_dir=None) -> Source:
    """A ``generate`` source replaced by the file of text generated (once, cached) from the expert."""
    if source.kind != "generate":
        return source
    from wildmerge.expert_data.cache import cache_root
    from wildmerge.expert_data.generate import ensure_generated

    path = ensure_generated(expert, model_path, source.generate, generated_dir or cache_root() / "generated")
    keep = {k: getattr(source, k) for k in ("n", "seq_len", "min_tokens", "batch_size", "seed")}
    return Source(file=str(Path(path)), **keep)


def recipe_entry(source: Source) -> dict:
    """A recipe model's ``calibration:`` entry for a (materialised) source: the old flat keys, ``data`` = where."""
    dumped = source.model_dump(exclude_none=True, exclude={"split"} if source.kind in ("file", "demo") else set())
    kind = source.kind
    out = {"data": dumped.pop(kind)} if kind in ("file", "demo", "dataset") else {}
    if kind == "generate":
        out["data"] = "generate"
        dumped.pop("generate")
    for k, v in dumped.items():
        out[_RECIPE_KEYS.get(k, k)] = v
    return out
