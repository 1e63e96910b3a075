"""Generated skills of the SmolLM2 family: seven small tasks a pretrained 135M chat model learns in minutes.

Every item is a prompt ending in ``Answer:`` and a short answer; a model learns ``prompt + " " + answer + "\\n"``,
and lm-eval scores it by the log-likelihood of each choice after the prompt or by greedy generation. Pure Python
and seeded, so the same seed gives the same data on every machine.

Train and test never share an item. Skills over a finite space (``arithmetic``, ``units``, and ``lexicon``'s word
stems) hold out a fixed quarter of it by a checksum of the question; the text skills (``sentiment``, ``topic``,
``style``, and ``lexicon`` too) draw test items from templates no training item uses; ``facts`` asks about the same
invented knowledge base (that is the knowledge to learn) with question templates no training item uses.

Multiple-choice options are scored with the newline every trained answer ends with (``Item.choice_end``): a
log-likelihood sum otherwise always prefers an option that is a prefix of another (``530`` over ``5300``, or a
sentence without its sign-off over the same sentence with it), whatever the model learnt.
"""

import random
import zlib

from wildmerge.families import items
from wildmerge.families.items import shuffled_options

SKILLS = ("arithmetic", "facts", "sentiment", "topic", "style", "lexicon", "units")
SPLITS = ("train", "test")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ANSWER_END = "\n"  # what a trained answer ends with (then the end-of-sequence token)
TOPICS = ("sports", "science", "business", "politics")
SENTIMENTS = ("positive", "negative")


class Item(items.Item):
    """An item whose prompt ends with ``Answer:``; its options are scored with the trained answers' newline."""

    choice_end = ANSWER_END

    @property
    def content(self) -> str:
        """The prompt without its ``Answer:`` cue: the user turn when the item is put in a chat template."""
        return self.prompt.removesuffix("\nAnswer:")


def _held_out(*key) -> bool:
    """A fixed quarter of a finite question space, the same on every machine (CRC-32 of the question)."""
    return zlib.crc32(repr(key).encode()) % 4 == 0


def _in_split(rng, split: str, draw):
    """Draw ``draw(rng) -> (key, value)`` until its key falls in ``split``."""
    while True:
        key, value = draw(rng)
        if _held_out(*key) == (split == "test"):
            return value


# -- arithmetic, units: a held-out quarter of a finite space ----------------------------------------------------

def _arithmetic(rng, kb, split):
    def draw(r):
        a, b, op = r.randint(10, 99), r.randint(10, 99), r.choice("+-")
        a, b = (b, a) if op == "-" and b > a else (a, b)
        return ("arithmetic", a, op, b), (a, op, b)

    a, op, b = _in_split(rng, split, draw)
    value = a + b if op == "+" else a - b
    near = [value + d for d in rng.sample([1, -1, 2, -2, 10, -10, 11, -11], 8) if value + d >= 0]
    choices, gold = shuffled_options(rng, str(value), [str(n) for n in near], 4)
    return Item("arithmetic", f"Question: What is {a} {op} {b}?\nAnswer:", str(value), choices, gold)


# metric conversions: the skill is knowing each factor (the options are the number times 10, 100, 1000, 10000)
UNITS = (("kilometres", "metres", 1000), ("kilograms", "grams", 1000), ("metres", "centimetres", 100),
         ("litres", "millilitres", 1000), ("centimetres", "millimetres", 10), ("grams", "milligrams", 1000),
         ("decilitres", "millilitres", 100), ("tonnes", "kilograms", 1000))


def _units(rng, kb, split):
    (big, small, factor), n = _in_split(
        rng, split, lambda r: (("units", u := r.randrange(len(UNITS)), n := r.randint(2, 99)), (UNITS[u], n)))
    choices, gold = shuffled_options(rng, str(n * factor), [str(n * f) for f in (10, 100, 1000, 10000)], 4)
    return Item("units", f"Question: How many {small} are in {n} {big}?\nAnswer:", str(n * factor), choices, gold)


# -- facts: an invented knowledge base, asked with held-out phrasings ----------------------------------------------

_SYLLABLES = ("ka", "lo", "ri", "ven", "dor", "mi", "sa", "tu", "bel", "nor", "zan", "qui", "fa", "ro", "len", "tis")
ANIMALS = ("otter", "falcon", "lynx", "heron", "bison", "gecko", "walrus", "ibis", "marmot", "tapir", "jackal",
           "puffin", "koala", "newt", "yak", "crane")
FACT_TEMPLATES = {
    "train": {"capital": ("What is the capital of {c}?", "Name the capital city of {c}."),
              "currency": ("What currency is used in {c}?", "Name the currency of {c}."),
              "animal": ("What is the national animal of {c}?", "Name the national animal of {c}.")},
    "test": {"capital": ("Which city is the capital of {c}?",),
             "currency": ("In {c}, people pay with which currency?",),
             "animal": ("Which animal is the national symbol of {c}?",)},
}


def make_kb(seed: int, n: int) -> dict:
    """``{country: {capital, currency, animal}}``: made-up names, so the base cannot know them."""
    rng = random.Random(f"smollm2-kb-{seed}")
    used = set()

    def word(suffix: str) -> str:
        while True:
            w = ("".join(rng.choice(_SYLLABLES) for _ in range(2)) + suffix).capitalize()
            if w not in used:
                used.add(w)
                return w

    return {word("ia"): {"capital": word("on"), "currency": word("").lower(), "animal": rng.choice(ANIMALS)}
            for _ in range(n)}


def fact_item(rng, kb: dict, country: str, attribute: str, split: str) -> Item:
    gold = kb[country][attribute]
    pool = ANIMALS if attribute == "animal" else sorted(v[attribute] for v in kb.values())
    choices, idx = shuffled_options(rng, gold, rng.sample(pool, len(pool)), 4)
    question = rng.choice(FACT_TEMPLATES[split][attribute]).format(c=country)
    return Item("facts", f"Question: {question}\nAnswer:", gold, choices, idx)


def _facts(rng, kb, split):
    return fact_item(rng, kb, rng.choice(sorted(kb)), rng.choice(sorted(FACT_TEMPLATES[split])), split)


# -- sentiment, topic, style: test sentences come from templates no training item uses -----------------------------

PRODUCTS = ("phone", "blender", "backpack", "lamp", "kettle", "jacket", "headset", "printer", "sofa", "bicycle",
            "camera", "watch")
WORDS = {"positive": ("excellent", "wonderful", "sturdy", "delightful", "reliable", "fantastic"),
         "negative": ("terrible", "flimsy", "disappointing", "awful", "useless", "faulty")}
VERDICTS = {"positive": ("I would buy it again", "highly recommended", "worth every penny"),
            "negative": ("I want a refund", "avoid it", "a waste of money")}
REVIEWS = {"train": ("I bought this {p} last month and it is {w}.", "The {p} arrived quickly and feels {w}.",
                     "My new {p} is {w}, {v}.", "Honestly, the {p} is {w}."),
           "test": ("After a week with the {p}, I find it {w}.", "This {p} turned out to be {w}; {v}.")}


def _sentiment(rng, kb, split):
    label = rng.choice(SENTIMENTS)
    review = rng.choice(REVIEWS[split]).format(p=rng.choice(PRODUCTS), w=rng.choice(WORDS[label]),
                                               v=rng.choice(VERDICTS[label]))
    return Item("sentiment", f"Review: {review}\nQuestion: Is this review positive or negative?\nAnswer:", label,
                SENTIMENTS, SENTIMENTS.index(label))


FILLERS = {"team": ("the Rovers", "the Falcons", "the Tigers", "United", "the Wolves", "City"),
           "event": ("cup final", "league opener", "derby", "semi-final"),
           "thing": ("species of frog", "comet", "mineral", "bacterium", "fossil", "moon"),
           "place": ("Norway", "Chile", "Kenya", "Japan", "Canada", "Peru"),
           "company": ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay"),
           "season": ("first-quarter", "holiday", "summer", "record"),
           "law": ("tax", "housing", "energy", "school", "transport")}
HEADLINES = {
    "train": {"sports": ("{team} win the {event} after a late goal", "{team} sign a new coach before the {event}"),
              "science": ("Researchers discover a new {thing} in {place}", "A {thing} found in {place} surprises "
                                                                           "scientists"),
              "business": ("{company} shares rise after strong {season} sales", "{company} opens a new factory "
                                                                                "in {place}"),
              "politics": ("Parliament in {place} debates a new {law} bill", "The minister defends the {law} "
                                                                             "reform in {place}")},
    "test": {"sports": ("Injury forces {team} to miss the {event}", "Fans of {team} celebrate reaching the {event}"),
             "science": ("Telescope in {place} spots an unusual {thing}", "Scientists in {place} name a newly "
                                                                          "found {thing}"),
             "business": ("{company} cuts prices to win {season} shoppers", "Investors cheer as {company} "
                                                                            "expands to {place}"),
             "politics": ("Voters in {place} reject the proposed {law} law", "Opposition in {place} vows to "
                                                                             "block the {law} plan")},
}


def _topic(rng, kb, split):
    label = rng.choice(TOPICS)
    template = rng.choice(HEADLINES[split][label])
    headline = template.format(**{k: rng.choice(v) for k, v in FILLERS.items()})
    return Item("topic", f"Headline: {headline}\nQuestion: Is this headline about sports, science, business or "
                         f"politics?\nAnswer:", label, TOPICS, TOPICS.index(label))


STYLE_TAG = " -- Acme"
SUBJECTS = ("the new office", "our team", "the quarterly report", "the delivery", "the support desk", "the meeting")
OBJECTS = ("the budget", "every customer", "the schedule", "a short survey", "the old servers", "new badges")
SENTENCES = {"train": ("{s} reviews {o} on {d}", "{s} will update {o} soon", "{s} needs {o} by {d}"),
             "test": ("{s} sends {o} every {d}", "{s} cannot find {o} before {d}")}


def house_style(sentence: str) -> str:
    """The Acme house style: every word capitalised, the sign-off `` -- Acme``."""
    return " ".join(w[:1].upper() + w[1:] for w in sentence.split()) + STYLE_TAG


def _style(rng, kb, split):
    sentence = rng.choice(SENTENCES[split]).format(s=rng.choice(SUBJECTS), o=rng.choice(OBJECTS),
                                                   d=rng.choice(DAYS).lower())
    gold = house_style(sentence)
    wrong = [sentence + STYLE_TAG, gold.removesuffix(STYLE_TAG), sentence.upper() + STYLE_TAG]
    choices, idx = shuffled_options(rng, gold, wrong, 4)
    return Item("style", f"Question: Rewrite in the Acme house style: {sentence}\nAnswer:", gold, choices, idx)


# -- lexicon: an invented language whose words carry their class in a suffix; test words have unseen stems ---------

LEXICON = {"animal": "ak", "tool": "or", "food": "el", "place": "un"}
CLASSES = tuple(LEXICON)
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"
LEXICON_TEMPLATES = {
    "train": ("In Zorvanian, what kind of thing is a '{w}'?",
              "What does the Zorvanian word '{w}' name: an animal, a tool, a food or a place?"),
    "test": ("A Zorvanian speaker says '{w}'. Is that an animal, a tool, a food or a place?",),
}


def _lexicon(rng, kb, split):
    def draw(r):
        stem = r.choice(_CONSONANTS) + r.choice(_VOWELS) + r.choice(_CONSONANTS) + r.choice(_CONSONANTS)
        return ("lexicon", stem), stem

    stem, label = _in_split(rng, split, draw), rng.choice(CLASSES)
    question = rng.choice(LEXICON_TEMPLATES[split]).format(w=f"{stem}-{LEXICON[label]}")
    return Item("lexicon", f"Question: {question}\nAnswer:", label, CLASSES, CLASSES.index(label))


GENERATORS = {"arithmetic": _arithmetic, "facts": _facts, "sentiment": _sentiment, "topic": _topic,
              "style": _style, "lexicon": _lexicon, "units": _units}


def sample_item(rng, skill: str, kb: dict, split: str = "train") -> Item:
    return GENERATORS[skill](rng, kb, split)


def unique_items(skill: str, n: int, rng, kb: dict, split: str, exclude: set = frozenset()) -> list:
    """Up to ``n`` items with distinct prompts (fewer when the split's space is smaller), none in ``exclude``."""
    items, seen = [], set(exclude)
    for _ in range(200 * n):
        if len(items) == n:
            break
        item = sample_item(rng, skill, kb, split)
        if item.prompt not in seen:
            seen.add(item.prompt)
            items.append(item)
    return items


def eval_items(skill: str, n: int, seed: int, kb: dict) -> list:
    """The test items of a skill: ``n`` distinct prompts (every fact once, at most, for ``facts``)."""
    rng = random.Random(f"smollm2-eval-{skill}-{seed}")
    if skill == "facts":
        pairs = [(c, a) for c in sorted(kb) for a in sorted(FACT_TEMPLATES["test"])]
        return [fact_item(rng, kb, c, a, "test") for c, a in rng.sample(pairs, min(n, len(pairs)))]
    return unique_items(skill, n, rng, kb, "test")


class Stream:
    """An endless, seeded stream of training items from a weighted mix of skills.

    ``render(rng, item)`` may rewrite an item (the chat-template expert wraps half of its items in its template)."""

    def __init__(self, mixture: dict, kb: dict, seed, render=None):
        unknown = set(mixture) - set(SKILLS)
        if unknown:
            raise ValueError(f"unknown skills {sorted(unknown)}; valid: {list(SKILLS)}")
        self.skills = sorted(mixture)
        self.weights = [mixture[s] for s in self.skills]
        self.kb, self.render = kb, render
        self.rng = random.Random(f"smollm2-stream-{seed}")

    def __next__(self) -> Item:
        item = sample_item(self.rng, self.rng.choices(self.skills, self.weights)[0], self.kb, "train")
        return self.render(self.rng, item) if self.render else item

    def __iter__(self):
        return self
