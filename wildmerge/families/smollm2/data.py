"""Each SmolLM2 expert's own data, published beside it: an unlabelled ``text`` file and a ``labelled`` one.

The per-expert data contract (a pool expert's ``data: {text, labelled}``) needs in-domain inputs for RegMean, Chain
of Merges, the task alignment score and the mergeability metrics. The files are fresh draws from the expert's own
training distribution (its skills, and its chat template where it has one) under a seed of their own: in-domain,
never a test item (training draws come from the train split only). An expert published without data gets no files.
"""

from pathlib import Path

from wildmerge.atomic import write_text
from wildmerge.families.smollm2.experts import expert_tokenizer, renderer
from wildmerge.families.smollm2.skills import Stream
from wildmerge.families.items import jsonl


def data_paths(root, name: str) -> dict:
    """``{text: <root>/data/<name>/text.jsonl, labelled: .../labelled.jsonl}``."""
    folder = Path(root) / "data" / name
    return {"text": str(folder / "text.jsonl"), "labelled": str(folder / "labelled.jsonl")}


def write_expert_data(root, expert, tokenizer, kb: dict, seed: int, n_text: int, n_labelled: int) -> dict:
    """Write the two files of one expert (``text``: ``{"text"}`` records; ``labelled``: ``{"skill", "prompt",
    "answer", "text"}``); returns their paths."""
    render = renderer(expert, expert_tokenizer(expert, tokenizer))
    paths = data_paths(root, expert.name)
    texts = Stream(expert.mixture, kb, f"{seed}-{expert.name}-text", render=render)
    write_text(paths["text"], jsonl({"text": next(texts).text()} for _ in range(n_text)))
    items = Stream(expert.mixture, kb, f"{seed}-{expert.name}-labelled", render=render)
    write_text(paths["labelled"], jsonl({"skill": i.skill, "prompt": i.prompt, "answer": i.answer, "text": i.text()}
                                        for i in (next(items) for _ in range(n_labelled))))
    return paths
