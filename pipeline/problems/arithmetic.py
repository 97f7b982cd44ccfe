"""Generated arithmetic word problems with exact answers (the embedded default's source).

SmolLM2-135M solves almost no GSM8K problem (FACTS.md), so a run on it labels nothing
correct and writes no SFT or DPO rows.  These problems are one or two steps of +, - or x
on small whole numbers, phrased as short word problems, so a 135M model solves a part of
them and a search over them yields both correct and incorrect answered nodes.

Deterministic: problem ``i`` of seed ``s`` is drawn from ``random.Random(f"{s}:{i}")``, so
a slice (``skip``/``limit``) or a larger ``count`` never changes the problems before it.
Ids are ``arith/<seed>/<i>``; every answer is a whole number >= 0.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

_NAMES = ("Ana", "Ben", "Carla", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jon")
_ITEMS = ("apples", "marbles", "pencils", "stickers", "cookies", "books", "coins", "shells")
# (singular, plural): "4 boxes", "2 shelves" (the same draws as before the plurals were fixed)
_BOXES = (
    ("box", "boxes"),
    ("bag", "bags"),
    ("jar", "jars"),
    ("basket", "baskets"),
    ("shelf", "shelves"),
)

Step = Callable[[random.Random, str, str, int], tuple[str, int]]


def _add(rng: random.Random, name: str, item: str, have: int) -> tuple[str, int]:
    n = rng.randint(2, 12)
    return f"Then {name} gets {n} more {item}.", have + n


def _sub(rng: random.Random, name: str, item: str, have: int) -> tuple[str, int]:
    n = rng.randint(1, max(1, have - 1))
    return f"Then {name} gives away {n} {item}.", have - n


def _double(rng: random.Random, name: str, item: str, have: int) -> tuple[str, int]:
    k = rng.choice((2, 3))
    word = "doubles" if k == 2 else "triples"
    return f"Then {name} {word} the number of {item}.", have * k


def _start(rng: random.Random, name: str, item: str) -> tuple[str, int]:
    if rng.random() < 0.3:  # a multiplication to start with
        per, count = rng.randint(2, 9), rng.randint(2, 6)
        box, boxes = rng.choice(_BOXES)
        return f"{name} has {count} {boxes} with {per} {item} in each {box}.", per * count
    n = rng.randint(3, 20)
    return f"{name} has {n} {item}.", n


def make_problem(seed: int, index: int, max_steps: int = 2) -> dict[str, Any]:
    """Problem ``index`` of ``seed``: 1..max_steps operations after the starting amount."""
    rng = random.Random(f"{seed}:{index}")
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    text, value = _start(rng, name, item)
    sentences = [text]
    multiplied = " in each " in text  # the start already is one operation
    steps = rng.randint(0, max_steps - 1) if multiplied else rng.randint(1, max_steps)
    for _ in range(steps):
        op: Step = rng.choice((_add, _sub, _double) if value <= 30 else (_add, _sub))
        sentence, value = op(rng, name, item, value)
        sentences.append(sentence)
    sentences.append(f"How many {item} does {name} have now?")
    operations = steps + int(multiplied)
    return {
        "id": f"arith/{seed}/{index}",
        "problem": " ".join(sentences),
        "answer": str(value),
        "steps": operations,
    }


def generate(seed: int, count: int, max_steps: int = 2) -> list[dict[str, Any]]:
    return [make_problem(seed, i, max_steps) for i in range(count)]
