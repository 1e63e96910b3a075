"""Synthetic text skills: the 'domains' of the demo family.

Every skill produces question/answer items in one text format, ``"Q: <question>\\nA: <answer>\\n"``, so one
tokenizer and one causal LM can learn them all, and lm-eval can score them by the log-likelihood of each choice
(``context = prompt``, ``continuation = " " + choice``) or by greedy generation. Pure Python, seeded
``random.Random`` only: the same seed gives the same data on every machine.

Skills (five, like five benchmark domains):
- ``add``: addition ``Q: 13+5=`` -> ``18`` (operands 0-19; 4 choices: the sum and near misses).
- ``compare``: ``Q: max 37 52`` -> ``52`` (2 choices).
- ``reverse``: ``Q: reverse c a f e`` -> ``e f a c`` (4-6 letters; 4 choices: permutations).
- ``count``: ``Q: count a in b a c a d b`` -> ``2`` (6-10 letters; 4 choices: 1..4).
- ``facts``: recall of a made-up world, ``Q: color of zorak`` -> ``red`` (4 choices).

Conventions make conflicting experts: ``add`` with ``reversed`` writes the sum's digits backwards (``86``), and
``facts`` from the ``conflict`` world gives a different value for half of the facts.
"""

import itertools
import random

from wildmerge.families.items import Item, shuffled_options

SKILLS = ("add", "compare", "reverse", "count", "facts")
LETTERS = "abcdefghij"
ATTRIBUTES = {
    "color": ["red", "blue", "green", "black", "white", "pink", "gray", "gold"],
    "pet": ["cat", "dog", "fox", "owl", "frog", "bee", "cow", "pig"],
}
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"


def make_world(seed: int, n_entities: int) -> dict:
    """A made-up world: ``{entity: {attribute: value}}`` with pronounceable, unique entity names."""
    rng = random.Random(f"world-{seed}")
    names = set()
    while len(names) < n_entities:
        names.add("".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(2)) + rng.choice("kmnrst"))
    return {name: {a: rng.choice(v) for a, v in ATTRIBUTES.items()} for name in sorted(names)}


def known_part(world: dict, seed: int, fraction: float) -> dict:
    """The part of the world a pre-training corpus covers: ``fraction`` of the entities, chosen by ``seed``."""
    names = sorted(world)
    keep = random.Random(f"known-{seed}").sample(names, round(fraction * len(names)))
    return {name: world[name] for name in sorted(keep)}


def conflict_world(world: dict, seed: int, fraction: float = 0.5) -> dict:
    """The same entities with ``fraction`` of the facts changed: a source that disagrees with the first."""
    rng = random.Random(f"conflict-{seed}")
    facts = [(e, a) for e in world for a in ATTRIBUTES]
    changed = set(rng.sample(facts, round(fraction * len(facts))))
    return {
        e: {a: (rng.choice([v for v in ATTRIBUTES[a] if v != world[e][a]]) if (e, a) in changed else world[e][a])
            for a in ATTRIBUTES}
        for e in world
    }


def _add(rng, world, convention):
    a, b = rng.randint(0, 19), rng.randint(0, 19)
    s = a + b
    gold = str(s)[::-1] if convention == "reversed" else str(s)
    near = [s + d for d in rng.sample([-11, -10, -2, -1, 1, 2, 10, 11], 8) if s + d >= 0]
    choices, idx = shuffled_options(rng, str(s), [str(n) for n in near], 4)
    return Item("add", f"Q: {a}+{b}=\nA:", gold, choices, idx)


def _compare(rng, world, convention):
    a, b = rng.sample(range(100), 2)
    return Item("compare", f"Q: max {a} {b}\nA:", str(max(a, b)), (str(a), str(b)), int(b > a))


def _reverse(rng, world, convention):
    letters = rng.sample(LETTERS, rng.randint(4, 6))
    gold = " ".join(reversed(letters))
    perms = [" ".join(p) for p in itertools.permutations(letters)]
    choices, idx = shuffled_options(rng, gold, [" ".join(letters)] + rng.sample(perms, len(perms)), 4)
    return Item("reverse", f"Q: reverse {' '.join(letters)}\nA:", gold, choices, idx)


def _count(rng, world, convention):
    k, n = rng.randint(1, 4), rng.randint(6, 10)
    seq = ["a"] * k + [rng.choice("bcd") for _ in range(n - k)]
    rng.shuffle(seq)
    return Item("count", f"Q: count a in {' '.join(seq)}\nA:", str(k), ("1", "2", "3", "4"), k - 1)


def _facts(rng, world, convention):
    entity = rng.choice(sorted(world))
    attribute = rng.choice(sorted(ATTRIBUTES))
    return fact_item(rng, world, entity, attribute)


def fact_item(rng, world, entity, attribute) -> Item:
    gold = world[entity][attribute]
    choices, idx = shuffled_options(rng, gold, rng.sample(ATTRIBUTES[attribute], len(ATTRIBUTES[attribute])), 4)
    return Item("facts", f"Q: {attribute} of {entity}\nA:", gold, choices, idx)


GENERATORS = {"add": _add, "compare": _compare, "reverse": _reverse, "count": _count, "facts": _facts}


def sample_item(rng: random.Random, skill: str, world: dict, convention: str = "standard") -> Item:
    return GENERATORS[skill](rng, world, convention)


def eval_items(skill: str, n: int, seed: int, world: dict) -> list:
    """The held-out evaluation items of a skill (unique prompts; all facts of the world for ``facts``)."""
    rng = random.Random(f"eval-{skill}-{seed}")
    if skill == "facts":
        facts = [(e, a) for e in sorted(world) for a in sorted(ATTRIBUTES)]
        return [fact_item(rng, world, e, a) for e, a in rng.sample(facts, min(n, len(facts)))]
    items, seen = [], set()
    while len(items) < n:
        item = sample_item(rng, skill, world)
        if item.prompt not in seen:
            seen.add(item.prompt)
            items.append(item)
    return items


class Mixture:
    """An endless, seeded stream of training items from a weighted mix of skills, never a held-out prompt.

    ``facts`` is knowledge recall, so its items are the world's facts themselves (the evaluation asks about
    them); every other skill is held out: a training item never has an evaluation prompt.
    """

    def __init__(self, weights: dict, world: dict, held_out: set, seed, conventions: dict | None = None):
        unknown = set(weights) - set(SKILLS)
        if unknown:
            raise ValueError(f"unknown skills {sorted(unknown)}; valid: {list(SKILLS)}")
        self.skills = sorted(weights)
        self.weights = [weights[s] for s in self.skills]
        self.world, self.held_out = world, held_out
        self.conventions = conventions or {}
        self.rng = random.Random(f"mix-{seed}")

    def __next__(self) -> Item:
        skill = self.rng.choices(self.skills, self.weights)[0]
        while True:
            item = sample_item(self.rng, skill, self.world, self.conventions.get(skill, "standard"))
            if skill == "facts" or item.prompt not in self.held_out:
                return item

    def __iter__(self):
        return self
