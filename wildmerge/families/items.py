"""A family's question / answer items and their JSONL files: what both embedded families generate and write.

An item is a prompt and a short answer; a model learns ``prompt + " " + answer + "\\n"``, and lm-eval scores it by
the log-likelihood of each option after the prompt (``choices``, ``gold``) or by greedy generation.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Iterable

from wildmerge.atomic import write_text


@dataclass(frozen=True)
class Item:
    skill: str
    prompt: str
    answer: str
    choices: tuple
    gold: int

    # what each option ends with in the lm-eval record (a family whose trained answers end with a newline scores its
    # options with it, so that no option is a prefix of another)
    choice_end: ClassVar[str] = ""

    def text(self) -> str:
        return f"{self.prompt} {self.answer}\n"

    def as_doc(self) -> dict:
        """The lm-eval record: skill, prompt, answer, choices, gold."""
        return {**asdict(self), "choices": [c + self.choice_end for c in self.choices]}


def shuffled_options(rng, gold: str, distractors, k: int) -> tuple:
    """``(options, index of gold)``: ``k`` unique options, ``gold`` among them at a random place."""
    options = [gold] + [d for d in dict.fromkeys(distractors) if d != gold][: k - 1]
    if len(options) < k:
        raise ValueError(f"not enough distractors for {gold!r}")
    rng.shuffle(options)
    return tuple(options), options.index(gold)


def jsonl(records: Iterable[dict]) -> str:
    """One JSON object a line."""
    return "".join(json.dumps(r) + "\n" for r in records)


def write_items(tasks_dir, items_by_skill: dict) -> None:
    """One ``<skill>.jsonl`` per skill of the items' lm-eval records."""
    for skill, items in items_by_skill.items():
        write_text(Path(tasks_dir) / f"{skill}.jsonl", jsonl(item.as_doc() for item in items))
