"""Generated natural language inference (NLI) in four genres, for the SmolLM2 family's LoRA NLI experts.

Chain of Merges' one LLM result merges LoRA experts fine-tuned on NLI datasets (SNLI, MultiNLI, SICK, ...; three
labels: entailment, neutral, contradiction). No dataset can be downloaded here, so the items are made from templates,
MultiNLI-style: each genre (``fiction``, ``government``, ``travel``, ``science``) has its own premises, its own
vocabulary and its own way a hypothesis follows from, is unrelated to, or contradicts its premise (events between
people, votes and budgets, journeys and timetables, quantities and comparisons), so each genre's expert learns
something the others do not. Pure Python and seeded: the same seed gives the same items on every machine.

Train and test never share an item: every template's key slot (a person, a body, a vehicle, a specimen) takes its
filler from a split-specific list, so a held-out premise names something no training item names. Labels are
balanced: a genre's items cycle through the three labels in order, each item's premise and wording drawn at random.
"""

import random

from wildmerge.families.smollm2.skills import Item

LABELS = ("entailment", "neutral", "contradiction")
GENRES = ("fiction", "government", "travel", "science")
SPLITS = ("train", "test")
QUESTION = "Entailment, neutral or contradiction?"

# filler -> {split: values}; a filler with one tuple is shared by both splits (never a template's only slot)
FILLERS = {
    "fiction": {"a": {"train": ("Anna", "Ben", "Clara", "David", "Elena", "Felix", "Grace", "Hugo"),
                      "test": ("Iris", "Jonas", "Kira", "Leon", "Mona")},
                "b": ("Nora", "Oscar", "Paula", "Quentin", "Rosa", "Simon"),
                "obj": ("letter", "ring", "book", "lamp", "scarf", "map", "key"),
                "place": ("kitchen", "garden", "attic", "cellar", "porch")},
    "government": {"body": {"train": ("city council", "senate", "regional assembly", "budget office"),
                            "test": ("parliament", "planning committee", "state cabinet")},
                   "law": ("housing", "transport", "water", "school", "health", "energy"),
                   "city": ("Tarvik", "Olmen", "Brisa", "Kelda", "Varno"),
                   "day": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"),
                   "n": tuple(str(n) for n in range(5, 40, 5))},
    "travel": {"vehicle": {"train": ("train", "bus", "ferry", "coach"), "test": ("tram", "plane", "night boat")},
               "c1": ("Lisbon", "Oslo", "Vienna", "Dublin", "Prague", "Madrid"),
               "c2": ("Athens", "Warsaw", "Bergen", "Porto", "Ghent", "Lyon"),
               "h": tuple(str(h) for h in range(5, 12))},
    "science": {"thing": {"train": ("seeds", "mice", "crystals", "cells", "snails"),
                          "test": ("bacteria", "ferns", "beetles")},
                "k": tuple(str(k) for k in range(2, 9)), "n": tuple(str(n) for n in range(10, 21)),
                "t": tuple(str(t) for t in range(30, 90, 10))},
}
KEY_SLOT = {"fiction": "a", "government": "body", "travel": "vehicle", "science": "thing"}

# genre -> (premise, {label: hypotheses}) templates
TEMPLATES = {
    "fiction": (
        ("{a} gave {b} a {obj} in the {place}.",
         ("{b} received a {obj}.", "{a} handed something to {b}."),
         ("{b} had asked for a {obj} for weeks.", "{a} and {b} are cousins."),
         ("{a} gave nothing to {b}.", "{b} never got a {obj} from {a}.")),
        ("{a} fell asleep in the {place} while {b} read aloud.",
         ("{a} was asleep.", "{b} was reading aloud."),
         ("{a} had worked late the night before.", "{b} reads aloud every evening."),
         ("{a} stayed awake the whole time.", "{b} said nothing at all.")),
        ("{a} lost the {obj} that {b} had lent them.",
         ("{b} had lent {a} a {obj}.", "The {obj} was lost."),
         ("The {obj} was very old.", "{b} was angry about the {obj}."),
         ("{a} never borrowed anything from {b}.", "The {obj} was never lost.")),
    ),
    "government": (
        ("The {body} of {city} approved the {law} bill on {day}.",
         ("The {law} bill was approved.", "The {body} of {city} voted for the {law} bill."),
         ("Most people in {city} wanted the {law} bill.", "The {law} bill was written by the mayor."),
         ("The {body} of {city} rejected the {law} bill.", "The {law} bill was never put to a vote.")),
        ("The {body} of {city} cut the {law} budget by {n} percent.",
         ("The {law} budget of {city} is smaller now.", "The {body} reduced a budget."),
         ("The cut was criticised by the press.", "The {law} budget will grow again next year."),
         ("The {body} of {city} raised the {law} budget.", "The {law} budget of {city} was left unchanged.")),
        ("The {body} postponed the vote on {city}'s {law} plan until {day}.",
         ("The vote on the {law} plan was delayed.", "The {body} did not vote on the {law} plan at once."),
         ("The {law} plan will pass on {day}.", "The {body} is divided on the {law} plan."),
         ("The {body} voted on the {law} plan without delay.", "There was never a {law} plan in {city}.")),
    ),
    "travel": (
        ("The {vehicle} from {c1} arrived in {c2} at {h} in the morning.",
         ("The {vehicle} reached {c2}.", "The {vehicle} had left {c1}."),
         ("The {vehicle} to {c2} was full of tourists.", "Tickets for the {vehicle} were cheap."),
         ("The {vehicle} never reached {c2}.", "The {vehicle} arrived in {c2} in the evening.")),
        ("Every seat on the {vehicle} from {c1} to {c2} was taken.",
         ("The {vehicle} to {c2} was full.", "No seat was free on the {vehicle}."),
         ("The {vehicle} to {c2} left on time.", "Most passengers were going home."),
         ("The {vehicle} to {c2} was almost empty.", "Many seats on the {vehicle} were free.")),
        ("Because of the storm, the {vehicle} from {c1} stopped halfway to {c2}.",
         ("The {vehicle} did not get to {c2} directly.", "There was a storm."),
         ("The passengers were given free meals.", "The storm lasted two days."),
         ("The {vehicle} went straight to {c2}.", "The weather was calm the whole way.")),
    ),
    "science": (
        ("In the experiment, {k} of the {n} {thing} survived the cold.",
         ("Some of the {thing} survived.", "Not all of the {thing} survived."),
         ("The {thing} were kept in the dark.", "The experiment was repeated twice."),
         ("None of the {thing} survived.", "Every one of the {n} {thing} survived.")),
        ("The {thing} grew faster in salt water than in fresh water.",
         ("The {thing} grew more slowly in fresh water.", "Salt water helped the {thing} grow."),
         ("The water was changed every day.", "The {thing} were collected in a forest."),
         ("The {thing} grew faster in fresh water.", "The {thing} did not grow in salt water.")),
        ("All {n} {thing} in the study were heated to {t} degrees.",
         ("The {thing} were heated.", "The study heated {n} {thing}."),
         ("The study lasted two years.", "The {thing} were bought from a shop."),
         ("None of the {thing} was heated.", "The {thing} were frozen instead.")),
    ),
}


def fillers(genre: str, split: str) -> dict:
    """``{slot: values}`` of ``genre`` for ``split`` (the key slot's own list, the others shared)."""
    return {slot: values[split] if isinstance(values, dict) else values for slot, values in FILLERS[genre].items()}


def _check(genre: str, split: str) -> None:
    if genre not in GENRES:
        raise ValueError(f"unknown NLI genre {genre!r}; valid: {', '.join(GENRES)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")


def nli_item(rng: random.Random, genre: str, label: str, split: str) -> Item:
    """One item of ``genre`` whose gold answer is ``label``: a premise and a hypothesis with the three labels as
    options (always in ``LABELS`` order)."""
    _check(genre, split)
    premise, *by_label = rng.choice(TEMPLATES[genre])
    slots = fillers(genre, split)
    values = {slot: rng.choice(options) for slot, options in slots.items()}
    if genre == "travel" and values["c1"] == values["c2"]:
        values["c2"] = next(c for c in slots["c2"] if c != values["c1"])
    hypothesis = rng.choice(by_label[LABELS.index(label)])
    prompt = (f"Premise: {premise.format(**values)}\nHypothesis: {hypothesis.format(**values)}\n"
              f"Question: {QUESTION}\nAnswer:")
    return Item(f"nli_{genre}", prompt, label, LABELS, LABELS.index(label))


def balanced_items(genre: str, n: int, seed, split: str, distinct: bool = False) -> list:
    """``n`` items of ``genre`` whose labels cycle through ``LABELS`` (balanced to one item), drawn under ``seed``;
    ``distinct``: no prompt twice (fewer items when the split's space is exhausted)."""
    rng = random.Random(f"smollm2-nli-{genre}-{split}-{seed}")
    out, seen = [], set()
    for i in range(200 * max(n, 1)):
        if len(out) == n:
            break
        item = nli_item(rng, genre, LABELS[len(out) % len(LABELS)], split)
        if distinct and item.prompt in seen:
            continue
        seen.add(item.prompt)
        out.append(item)
    return out


def eval_items(genre: str, n: int, seed: int) -> list:
    """The held-out items of ``genre``: ``n`` distinct prompts of the test split, labels balanced."""
    return balanced_items(genre, n, f"eval-{seed}", "test", distinct=True)


class NliStream:
    """An endless, seeded stream of training items of one genre, labels in turn (``Stream``'s interface)."""

    def __init__(self, genre: str, seed):
        _check(genre, "train")
        self.genre, self.count = genre, 0
        self.rng = random.Random(f"smollm2-nli-stream-{genre}-{seed}")

    def __next__(self) -> Item:
        item = nli_item(self.rng, self.genre, LABELS[self.count % len(LABELS)], "train")
        self.count += 1
        return item

    def __iter__(self):
        return self
