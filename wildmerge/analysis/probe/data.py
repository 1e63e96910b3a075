"""The probe's input: a suite's lm-eval tasks that have train / validation / test splits and one fixed label set.

Items are read through lm-eval itself (``doc_to_text``, ``doc_to_choice``, ``doc_to_target``), so the probe sees
the same contexts and labels lm-eval scores. A task that cannot be probed is not an error for the whole suite: it
gets a reason, and its cells are marked missing with that reason.
"""

import hashlib
import json
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

SPLITS = ("train", "validation", "test")


@dataclass
class ProbeTask:
    name: str
    label: str  # the suite's column name
    labels: Tuple[str, ...]  # the fixed label set (lm-eval choices)
    delimiter: str  # lm-eval's target_delimiter: a choice is scored as delimiter + choice
    contexts: Dict[str, List[str]] = field(default_factory=dict)  # split -> contexts
    gold: Dict[str, List[int]] = field(default_factory=dict)  # split -> index into labels

    def data_hash(self) -> str:
        """Changes whenever anything the features or labels depend on changes."""
        blob = json.dumps([self.name, self.labels, self.delimiter, self.contexts, self.gold], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _docs(task, split: str) -> list:
    has = {"train": task.has_training_docs, "validation": task.has_validation_docs, "test": task.has_test_docs}[split]
    if not has():
        return []
    docs = {"train": task.training_docs, "validation": task.validation_docs, "test": task.test_docs}[split]()
    return list(docs) if docs is not None else []


def _gold_index(task, doc, labels) -> int:
    target = task.doc_to_target(doc)
    if isinstance(target, str) and not target.isdigit():
        return labels.index(target)
    return int(target)


def read_task(task, name: str, label: str):
    """A ProbeTask, or a string saying why this task cannot be probed."""
    if task.OUTPUT_TYPE != "multiple_choice":
        return (f"{task.OUTPUT_TYPE} task: free text has no fixed label set for a linear head; the probe needs a "
                f"multiple-choice task whose items share one list of choices")
    docs = {s: _docs(task, s) for s in SPLITS}
    missing = [s for s in SPLITS if not docs[s]]
    if missing:
        return (f"no {' / '.join(missing)} split: the probe trains a head on train, picks its epoch on validation "
                f"and scores test; give the task YAML training_split, validation_split and test_split")
    first = tuple(task.doc_to_choice(docs["train"][0]))
    out = ProbeTask(name, label, first, task.config.target_delimiter)
    for split in SPLITS:
        contexts, gold = [], []
        for i, doc in enumerate(docs[split]):
            choices = tuple(task.doc_to_choice(doc))
            if choices != first:
                return (f"the label set differs across items ({split} item {i} has {list(choices)[:6]}, the first "
                        f"train item {list(first)[:6]}): one fresh head needs one fixed label set")
            contexts.append(task.doc_to_text(doc))
            gold.append(_gold_index(task, doc, first))
        out.contexts[split], out.gold[split] = contexts, gold
    return out


def load_probe_tasks(suite) -> Tuple[Dict[str, ProbeTask], Dict[str, str]]:
    """({task name: ProbeTask}, {task name: why it cannot be probed}) for every task of ``suite``."""
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=suite.resolved_include_path(), include_defaults=suite.settings.include_defaults)
    tasks, skipped = {}, {}
    for t in suite.tasks:
        loaded = tm.load_task_or_group([t.task])
        task = loaded.get(t.task)
        if task is None or isinstance(task, dict):
            skipped[t.task] = "a group or tag, not one task: list its tasks in the suite to probe them"
            continue
        result = read_task(task, t.task, t.name)
        (tasks if isinstance(result, ProbeTask) else skipped)[t.task] = result
    return tasks, skipped
