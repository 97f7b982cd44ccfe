"""The two services a search talks to: a policy LLM and a process scorer.

Both are async protocols so that many searches can share one event loop and
one engine.  The search core never renders chat templates or tokenizes on its
own: a `Policy` receives the problem and the assistant text produced so far and
continues it; a `Scorer` receives the problem and the path of step texts.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# What the package re-exports (search/__init__.py): the contract between search and engines.
__all__ = [
    "COUNT_FAULTS",
    "TOKEN_KINDS",
    "ClampedCounts",
    "FinishReason",
    "Generation",
    "GenerationRequest",
    "Policy",
    "Score",
    "ScoreRequest",
    "Scorer",
    "TokenCounts",
]


class FinishReason(enum.StrEnum):
    """How one generated choice ended.

    The paper (App. A) treats only *natural* termination as an answer, so a
    stop string and the end-of-sequence token must be told apart.
    """

    STOP_STRING = "stop_string"  # hit the step boundary ("\\nStep")
    EOS = "eos"  # the model ended the sequence on its own
    LENGTH = "length"  # hit max_tokens
    CONTEXT_OVERFLOW = "context_overflow"  # the path no longer fits the model's context
    ERROR = "error"  # the request failed; the node is kept but never expanded


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One policy request: continue `assistant_prefix` for `problem`, n times.

    `max_tokens` is a per-choice cap already clipped by the budget, so an engine
    that honours it can never make a search overspend.
    """

    problem: str
    assistant_prefix: str
    n: int
    max_tokens: int
    stop: tuple[str, ...]
    temperature: float
    seed: int


# What an engine's token counts can have wrong (`ClampedCounts`' fields, the names the
# engines record a fault by: `actors.engines.read_counts`).
COUNT_FAULTS = ("cached_above_sent", "negative", "not_a_number")


@dataclass(frozen=True, slots=True)
class ClampedCounts:
    """Engine answers whose token counts could not be, and which were clamped where they
    entered (made whole numbers of at least 0, cached at most sent): how many answers,
    and how many of them had each fault.  The search never reads it; it travels with a
    `Generation` or a `Score` so that the run can say how often its engines did that
    (the answers' counts themselves are already the clamped ones).

    An answer with two faults counts once in `answers` and once under each fault.
    """

    answers: int = 0
    cached_above_sent: int = 0  # more prompt tokens served from the cache than sent
    negative: int = 0  # a count below zero
    not_a_number: int = 0  # a count that was no whole number (a string, NaN, 2.5)

    @classmethod
    def of(cls, faults: Iterable[str]) -> ClampedCounts:
        """One answer with `faults` (names from `COUNT_FAULTS`; none: no such answer)."""
        kinds = set(faults)
        if not kinds:
            return cls()
        unknown = kinds - set(COUNT_FAULTS)
        if unknown:
            raise ValueError(f"unknown count faults {sorted(unknown)}; known: {COUNT_FAULTS}")
        return cls(1, **{kind: 1 for kind in kinds})

    def __add__(self, other: ClampedCounts) -> ClampedCounts:
        return ClampedCounts(
            self.answers + other.answers,
            self.cached_above_sent + other.cached_above_sent,
            self.negative + other.negative,
            self.not_a_number + other.not_a_number,
        )

    def __bool__(self) -> bool:
        return self.answers > 0


@dataclass(frozen=True, slots=True)
class Generation:
    """One generated choice: its text (stop string excluded) and its cost.

    `cached_input_tokens`: of `input_tokens`, the ones the engine read from its prefix
    cache instead of computing them (0: none, or the engine does not say).
    `retryable`: for an `error` choice, whether asking again may help; False when the
    engine already retried the request itself or the server refused it (a 4xx), so no
    layer above asks again.  `clamped`: whether the engine's counts for this choice had
    to be clamped (`ClampedCounts`)."""

    text: str
    output_tokens: int
    finish: FinishReason
    input_tokens: int = 0  # prompt tokens of the request this choice came from
    error: str | None = None
    cached_input_tokens: int = 0
    retryable: bool = True
    clamped: ClampedCounts = ClampedCounts()


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """Ask for Q of one node.

    `path` holds the texts of every node from the root's first child down to
    the node to score (each with the fixed text the search inserted before it),
    `parent_context` is what the scorer returned for the parent, so a scorer
    such as GenPRM can reuse the critiques of ancestor steps.

    `answer_end`: for an answered node whose text states its answer, where that
    statement ends in `path[-1]` (`search.answers.answer_span` under the run's answer
    extraction, offset by the inserted text), so a scorer can score the text a training
    row holds (cut after the answer); None otherwise.
    """

    problem: str
    path: tuple[str, ...]
    parent_context: Any
    answered: bool
    answer: str | None
    full_generation: bool
    max_cost: float  # the most this call may charge to the budget (cost units)
    parent_answered: bool = False  # the node continues an answer (GenPRM may restart)
    answer_end: int | None = None  # answered: where path[-1]'s answer statement ends


@dataclass(frozen=True, slots=True)
class Score:
    value: float  # Q(x) in [0, 1]
    context: Any = None  # handed to this node's children as `parent_context`
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    cached_input_tokens: int = 0  # of input_tokens, read from the engine's prefix cache
    # the engine answers behind this score whose counts had to be clamped (`ClampedCounts`)
    clamped: ClampedCounts = ClampedCounts()


@runtime_checkable
class Policy(Protocol):
    name: str

    async def generate(self, request: GenerationRequest) -> Sequence[Generation]:
        """Return exactly `request.n` choices (failed ones as FinishReason.ERROR)."""
        ...

    async def count_tokens(self, text: str) -> int:
        """Tokens of `text` in the policy's tokenizer (charges fixed prompt text)."""
        ...


@runtime_checkable
class Scorer(Protocol):
    name: str

    async def score(self, request: ScoreRequest) -> Score: ...


# The token counts by kind, in one vocabulary: the `TokenCounts` fields, the live progress
# counters (`actors.progress.Counters`) and the `trees` table's columns are all named so.
TOKEN_KINDS = (
    "policy_output_tokens",
    "policy_input_tokens",
    "inserted_prompt_tokens",
    "prm_input_tokens",
    "prm_output_tokens",
    "policy_prompt_sent_tokens",
    "policy_prompt_cached_tokens",
    "prm_prompt_cached_tokens",
)


@dataclass(slots=True)
class TokenCounts:
    """Raw token counters of one search, before any weighting (kinds: `TOKEN_KINDS`)."""

    policy_output_tokens: int = 0
    policy_input_tokens: int = 0
    inserted_prompt_tokens: int = 0  # fixed text the search adds (continuation prompt)
    prm_input_tokens: int = 0
    prm_output_tokens: int = 0
    policy_requests: int = 0
    scorer_requests: int = 0
    failed_generations: int = 0
    failed_scores: int = 0
    # What the engines read, apart from what the budget charges: every engine call's
    # prompt (one per choice: n choices of one request are n calls) and, of those tokens,
    # the ones served from the engine's prefix cache; computed = sent - cached.
    policy_prompt_sent_tokens: int = 0
    policy_prompt_cached_tokens: int = 0
    prm_prompt_cached_tokens: int = 0

    @classmethod
    def of_request(
        cls,
        generations: Sequence[Generation],
        *,
        input_tokens: int | None = None,
        inserted_tokens: int = 0,
    ) -> TokenCounts:
        """What one policy request adds to the counters: its choices' output, its prompt
        counted once (its n choices share one prompt), the fixed text the search inserted
        and what the engine read.  The search's budget and the live progress counters
        both count with it.

        `input_tokens`: the prompt as the budget charged it; None takes the engine's count.
        """
        sent = cached = output = most = 0
        for g in generations:
            output += g.output_tokens
            sent += g.input_tokens
            cached += g.cached_input_tokens
            most = max(most, g.input_tokens)
        return cls(
            policy_output_tokens=output,
            policy_input_tokens=most if input_tokens is None else input_tokens,
            inserted_prompt_tokens=inserted_tokens,
            policy_prompt_sent_tokens=sent,
            policy_prompt_cached_tokens=cached,
        )

    @classmethod
    def of_score(cls, score: Score) -> TokenCounts:
        """What one score adds to the counters (as `of_request` for a policy request)."""
        return cls(
            prm_input_tokens=score.input_tokens,
            prm_output_tokens=score.output_tokens,
            prm_prompt_cached_tokens=score.cached_input_tokens,
        )

    def add(self, other: TokenCounts) -> None:
        """Add `other`'s counts to these, kind by kind."""
        self.policy_output_tokens += other.policy_output_tokens
        self.policy_input_tokens += other.policy_input_tokens
        self.inserted_prompt_tokens += other.inserted_prompt_tokens
        self.prm_input_tokens += other.prm_input_tokens
        self.prm_output_tokens += other.prm_output_tokens
        self.policy_requests += other.policy_requests
        self.scorer_requests += other.scorer_requests
        self.failed_generations += other.failed_generations
        self.failed_scores += other.failed_scores
        self.policy_prompt_sent_tokens += other.policy_prompt_sent_tokens
        self.policy_prompt_cached_tokens += other.policy_prompt_cached_tokens
        self.prm_prompt_cached_tokens += other.prm_prompt_cached_tokens
