"""A deterministic scripted world for differential tests of the search algorithms.

Every node is identified by its path of child indices from the root, e.g.
(0, 1) is the second child of the root's first child.  Its score Q, its cost in
output tokens and whether it ends with an answer are a hash of (seed, path), so
any implementation that expands the same nodes in the same order sees the same
world, whatever requests it makes.  Generated text carries the path as a tag
(" [0.1]") so the policy and the scorer find a node's path in what the search
sends them; the policy numbers a parent's children in the order it generates
them.  A generation cut by `max_tokens` ends with `length` and no answer.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from search.protocols import FinishReason, Generation, GenerationRequest, Score, ScoreRequest

Path = tuple[int, ...]
_TAG = re.compile(r"\[([0-9.]*)\]")


@dataclass(frozen=True, slots=True)
class Outcome:
    q: float
    cost: int  # output tokens of the whole (uncut) generation
    answered: bool


def _uniforms(seed: int, path: Path, count: int) -> list[float]:
    digest = hashlib.blake2b(repr((seed, path)).encode(), digest_size=8 * count).digest()
    return [int.from_bytes(digest[8 * i : 8 * i + 8], "big") / 2**64 for i in range(count)]


@dataclass(frozen=True, slots=True)
class HashWorld:
    """Q, cost and answered state from a hash of the path; 5% of scores are exactly 0 or 1."""

    seed: int
    full_generation: bool = False
    p_answer: float = 0.2

    def outcome(self, path: Path) -> Outcome:
        u_q, u_cost, u_answer, u_edge = _uniforms(self.seed, path, 4)
        q = 0.0 if u_edge < 0.025 else 1.0 if u_edge > 0.975 else u_q
        cost = 40 + int(u_cost * 400) if self.full_generation else 5 + int(u_cost * 60)
        p_answer = 0.6 if self.full_generation else self.p_answer
        return Outcome(q, cost, u_answer < p_answer)


@dataclass(frozen=True, slots=True)
class TableWorld:
    """A hand-written world: listed paths, every other path gets `default`."""

    table: Mapping[Path, Outcome]
    default: Outcome = Outcome(0.3, 10, False)

    def outcome(self, path: Path) -> Outcome:
        return self.table.get(path, self.default)


World = HashWorld | TableWorld


def tag(path: Path) -> str:
    return f" [{'.'.join(map(str, path))}]"


def path_of(text: str) -> Path:
    """The path in the last tag of `text`; () (the root) when there is none."""
    found = _TAG.findall(text)
    if not found or not found[-1]:
        return ()
    return tuple(int(part) for part in found[-1].split("."))


def generate(world: World, path: Path, max_tokens: int) -> Generation:
    """The node at `path`, cut at `max_tokens` (then unanswered)."""
    out = world.outcome(path)
    if out.cost > max_tokens:
        return Generation(tag(path) + " ...", max_tokens, FinishReason.LENGTH)
    if out.answered:
        return Generation(tag(path) + " The answer is \\boxed{7}", out.cost, FinishReason.EOS)
    return Generation(tag(path), out.cost, FinishReason.STOP_STRING)


@dataclass
class WorldPolicy:
    """Continues a path: choice j of a request is the parent's next unused child index."""

    world: World
    name: str = "world"
    requests: list[tuple[Path, int, int]] = field(default_factory=list)  # (parent, n, max_tokens)
    _children: dict[Path, int] = field(default_factory=dict)

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        parent = path_of(request.assistant_prefix)
        self.requests.append((parent, request.n, request.max_tokens))
        first = self._children.get(parent, 0)
        self._children[parent] = first + request.n
        return [
            generate(self.world, (*parent, first + j), request.max_tokens) for j in range(request.n)
        ]

    async def count_tokens(self, text: str) -> int:
        return len(text.split())


@dataclass
class WorldScorer:
    world: World
    name: str = "world"

    async def score(self, request: ScoreRequest) -> Score:
        return Score(self.world.outcome(path_of(request.path[-1])).q)
