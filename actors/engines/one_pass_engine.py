"""What every one-pass PRM engine shares: a path laid out, checked, scored and read.

A one-pass engine (transformers on CPU, vLLM's pooling runner in-process, a vLLM server's
`/pooling` endpoint) scores a path in five moves, and only one of them depends on the
engine:

1. lay the path out as the model was trained (`actors.engines.step_layout.layout`): the
   step separator's one token, the tokenizer's BOS if it has one, the ids of each text;
2. refuse a path that must not be sent (`step_layout.unscorable`: longer than the
   context, or no step to read);
3. run the model: the ids give one row of class logits per token - this is the engine's
   part (`OnePassEngine._rows`);
4. read each step's value at the separator closing it (`values_at`), as the probability
   of a good step (`good_step_probability`); an engine that read a prefix of the path
   from its cache gives rows for the rest only (`SuffixValues`, below);
5. answer an error `StepValues` for whatever failed, never raise.

`OnePassEngine` does 1, 2, 4 and 5; an engine subclasses it and supplies its tokenizer
(`_ids`, `_bos`) and its model (`_rows`).

Reading the prefix cache: a child's path is its parent's path plus one step, so an engine
with a prefix cache (vLLM) need compute only the new step; but then it returns rows for
the uncached suffix only, and the separators of the earlier steps lie in the cached part.
Their values are the ones this engine read when it scored the parent (the same tokens give
the same row), so the engine keeps each separator's value, keyed by the tokens up to it,
in a bounded LRU (`SuffixValues`).  A value it no longer holds (evicted, or first seen in
a prefix another request cached) sends the path again without reading the cache: the
values are always those of a cold forward pass.

Why raw logits, read here, rather than the probabilities vLLM can return: vLLM picks its
activation from the model config (softmax, sigmoid, or none for a `problem_type` of
"regression"), while a PRM's value is by its training the softmax probability of class 1
("good step"), as Qwen2.5-Math-PRM's model card computes it and TRL's token-classification
labels mean.  So every engine asks for raw logits and this module turns them into the
value, the same way for all of them.
"""

from __future__ import annotations

import asyncio
import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from actors.engines.base import StepValues
from actors.engines.step_layout import StepLayout, layout, separator_id, unscorable

# The trainer's label of a good step (TRL's stepwise labels: 1 good, 0 bad).
GOOD_STEP = 1


def good_step_probability(logits: Sequence[float]) -> float:
    """A good step's probability from one token's class logits.

    Two labels (bad, good): the softmax probability of the good one.  One label (a
    regression-style reward head): the sigmoid of that logit, the probability a one-output
    head is trained to give.
    """
    if len(logits) == 1:
        return 1.0 / (1.0 + math.exp(-float(logits[0])))
    top = max(float(x) for x in logits)  # subtracted so that exp never overflows
    weights = [math.exp(float(x) - top) for x in logits]
    return weights[GOOD_STEP] / sum(weights)


def values_at(
    rows: Sequence[Sequence[float]],
    positions: Sequence[int],
    input_tokens: int,
    cached_tokens: int = 0,
    *,
    source: str,
    count_faults: frozenset[str] = frozenset(),
) -> StepValues:
    """Each step's value from `rows` (one row of class logits per input token), read at the
    separator `positions`; an error StepValues when the rows do not cover the sequence
    (a pooler that left tokens out: its positions would be another token's).
    `count_faults`: what the engine found wrong with its counts (`StepValues`)."""
    if len(rows) != input_tokens:
        return StepValues(
            (),
            input_tokens,
            cached_tokens,
            count_faults=count_faults,
            error=f"{source} returned {len(rows)} rows for {input_tokens} tokens; a one-pass "
            "PRM needs one per token: vLLM's pooler must be ALL, not STEP (start the server "
            'with --pooler-config \'{"tok_pooling_type": "ALL"}\')',
        )
    if rows and not len(rows[0]):
        return StepValues(
            (),
            input_tokens,
            cached_tokens,
            error=f"{source} returned no labels",
            count_faults=count_faults,
        )
    return StepValues(
        tuple(good_step_probability(rows[p]) for p in positions),
        input_tokens,
        cached_tokens,
        count_faults=count_faults,
    )


@dataclass(frozen=True, slots=True)
class TokenRows:
    """What a model gives for one laid-out path: a row of class logits per input token (or,
    when its prefix cache served the first `cached_tokens`, per token after those), and
    how many of the tokens its prefix cache served (0: none, or not reported), and what
    the engine found wrong with the counts it reported (`StepValues.count_faults`)."""

    rows: Sequence[Sequence[float]]
    cached_tokens: int = 0
    count_faults: frozenset[str] = frozenset()


class SuffixValues:
    """The step values an engine read, kept to fill in the steps a cached prefix holds.

    Keyed by the token ids up to and including a separator (the row there depends on
    nothing else), at most `size` of them, least recently used dropped first."""

    def __init__(self, size: int = 65_536) -> None:
        self.size = size
        self._values: OrderedDict[tuple[int, int], float] = OrderedDict()

    @staticmethod
    def _key(ids: Sequence[int], position: int) -> tuple[int, int]:
        return position, hash(tuple(ids[: position + 1]))

    def remember(
        self, ids: Sequence[int], positions: Sequence[int], values: Sequence[float]
    ) -> None:
        for position, value in zip(positions, values, strict=True):
            key = self._key(ids, position)
            self._values[key] = value
            self._values.move_to_end(key)
        while len(self._values) > self.size:
            self._values.popitem(last=False)

    def read(self, path: StepLayout, rows: TokenRows) -> tuple[float, ...] | None:
        """Each step's value from suffix `rows` (the first `rows.cached_tokens` tokens were
        read from the engine's cache), the cached steps' from what was remembered; None
        when one of them was not (the caller scores the path cold)."""
        offset = rows.cached_tokens
        if offset + len(rows.rows) != len(path.input_ids):
            return None  # not a suffix this engine can place: read the path cold
        values: list[float] = []
        for position in path.positions:
            if position >= offset:
                values.append(good_step_probability(rows.rows[position - offset]))
                continue
            key = self._key(path.input_ids, position)
            if key not in self._values:
                return None
            self._values.move_to_end(key)
            values.append(self._values[key])
        return tuple(values)


class OnePassEngine(ABC):
    """A `StepScoringEngine` (actors/engines/base.py) built on the five moves of the module
    docstring; a subclass supplies `_ids`, `_bos` and `_rows`, and may reword its failures
    (`_failure`).

    `separator` is the step separator's token id: an engine that has its tokenizer at hand
    sets it when built (so a bad separator fails at start); otherwise it is found on the
    first path, and a separator that is not one token is that path's error.
    """

    name: str
    context_length: int
    step_separator: str
    separator: int | None = None
    _suffix_values: SuffixValues | None = None
    # How error messages name what answered the rows ("vLLM pooling", "/pooling").
    source: ClassVar[str]

    # -- what an engine supplies ------------------------------------------------------

    @abstractmethod
    async def _ids(self, texts: Sequence[str]) -> Mapping[str, list[int]]:
        """Each text's token ids, without special tokens."""

    @abstractmethod
    async def _bos(self) -> int | None:
        """The token the tokenizer puts before a text (None: it puts none)."""

    @abstractmethod
    async def _rows(self, path: StepLayout, read_cache: bool = True) -> TokenRows | StepValues:
        """The model's rows for `path.input_ids`, or the error StepValues of a request the
        model refused (an exception raised here becomes one through `_failure`).
        `read_cache`: an engine with a prefix cache may read the path's prefix from it
        (and give rows for the rest only); False: rows for every token."""

    def _failure(self, exc: Exception, input_tokens: int) -> StepValues:
        """The error StepValues of a path whose layout or request raised `exc`."""
        return StepValues((), input_tokens, error=str(exc) or type(exc).__name__)

    # -- what every engine shares -----------------------------------------------------

    async def lay_out(self, prompt: str, steps: Sequence[str]) -> StepLayout:
        """The ids this engine scores for a path, and where each step's value is read."""
        if self.separator is None:
            text = self.step_separator
            ids = (await self._ids([text]))[text]
            self.separator = separator_id(lambda _: ids, text)
        separator = self.separator
        bos = await self._bos()
        known = await self._ids([prompt, *steps])
        return layout(known.__getitem__, prompt, steps, separator, bos)

    async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
        """Every step's value; never raises for a bad request (an error StepValues)."""
        input_tokens = 0
        try:
            path = await self.lay_out(prompt, steps)
            input_tokens = len(path.input_ids)
            refused = unscorable(path, self.context_length)
            if refused is not None:
                return refused
            answer = await self._rows(path)
            values = None
            if isinstance(answer, TokenRows) and 0 < len(answer.rows) < input_tokens:
                values = self._suffix.read(path, answer)
                if values is None:  # a cached step's value this engine did not keep
                    answer = await self._rows(path, read_cache=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bad request must not kill the search
            return self._failure(exc, input_tokens)
        if isinstance(answer, StepValues):
            return answer
        if values is not None:
            result = StepValues(
                values, input_tokens, answer.cached_tokens, count_faults=answer.count_faults
            )
        else:
            result = values_at(
                answer.rows,
                path.positions,
                input_tokens,
                answer.cached_tokens,
                source=self.source,
                count_faults=answer.count_faults,
            )
        if result.error is None:
            self._suffix.remember(path.input_ids, path.positions, result.values)
        return result

    @property
    def _suffix(self) -> SuffixValues:
        """This engine's remembered step values (made on first use, so that the engines'
        own constructors need not know of them)."""
        if self._suffix_values is None:
            self._suffix_values = SuffixValues()
        return self._suffix_values


__all__ = [
    "GOOD_STEP",
    "OnePassEngine",
    "SuffixValues",
    "TokenRows",
    "good_step_probability",
    "values_at",
]
