"""What every one-pass PRM engine shares (`actors.engines.one_pass_engine`), without a model.

A good step's probability for both head shapes, reading values at the separators, and the
base class's moves (layout, the context check, errors) through a stand-in engine whose
"model" is a table of logits.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

import pytest

from actors.engines.base import StepScoringEngine, StepValues
from actors.engines.one_pass_engine import (
    OnePassEngine,
    TokenRows,
    good_step_probability,
    values_at,
)
from actors.engines.step_layout import StepLayout, layout


def test_two_labels_are_the_softmax_of_the_good_one() -> None:
    assert good_step_probability([0.0, 0.0]) == pytest.approx(0.5)
    assert good_step_probability([0.0, math.log(3)]) == pytest.approx(0.75)
    assert good_step_probability([math.log(3), 0.0]) == pytest.approx(0.25)
    # far beyond exp's range: the largest logit is subtracted first
    assert good_step_probability([1000.0, 1000.0 + math.log(3)]) == pytest.approx(0.75)


def test_one_label_is_the_sigmoid_of_its_logit() -> None:
    assert good_step_probability([0.0]) == pytest.approx(0.5)
    assert good_step_probability([math.log(3)]) == pytest.approx(0.75)
    assert good_step_probability([-math.log(3)]) == pytest.approx(0.25)


def test_values_are_read_at_the_separators() -> None:
    rows = [[0.0, 0.0], [0.0, math.log(3)], [0.0, 0.0], [math.log(3), 0.0]]
    values = values_at(rows, [1, 3], 4, 2, source="test")
    assert values.error is None and (values.input_tokens, values.cached_tokens) == (4, 2)
    assert values.values == pytest.approx((0.75, 0.25))


def test_rows_that_miss_tokens_or_labels_are_errors() -> None:
    short = values_at([[0.0, 1.0]], [0], 3, source="/pooling")
    assert short.values == () and short.input_tokens == 3
    assert (short.error or "").startswith("/pooling returned 1 rows for 3 tokens")
    assert "tok_pooling_type" in (short.error or "")
    empty = values_at([[], []], [1], 2, source="vLLM pooling")
    assert empty.values == () and empty.error == "vLLM pooling returned no labels"


VOCABULARY = {"<sep>": [9], "two tokens": [7, 8]}


class TableEngine(OnePassEngine):
    """One token per character; the "model" gives every token the logits `row`."""

    source: ClassVar[str] = "table"
    name = "table"

    def __init__(self, row: Sequence[float], *, context_length: int = 64) -> None:
        self.row = list(row)
        self.context_length = context_length
        self.step_separator = "<sep>"
        self.sent: list[StepLayout] = []

    async def _ids(self, texts: Sequence[str]) -> dict[str, list[int]]:
        return {t: VOCABULARY.get(t, [ord(c) for c in t]) for t in texts}

    async def _bos(self) -> int | None:
        return 1

    async def _rows(self, path: StepLayout, read_cache: bool = True) -> TokenRows | StepValues:
        self.sent.append(path)
        if ord("!") in path.input_ids:
            raise RuntimeError("the model broke")
        return TokenRows([self.row] * len(path.input_ids), cached_tokens=1)

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        raise NotImplementedError

    async def tokenize(self, text: str) -> list[int]:
        return list((await self._ids([text]))[text])

    async def close(self) -> None:
        return None


def score(engine: OnePassEngine, prompt: str, steps: list[str]) -> StepValues:
    return asyncio.run(engine.score_steps(prompt, steps))


@pytest.mark.parametrize(("row", "value"), [([0.0, math.log(3)], 0.75), ([math.log(3)], 0.75)])
def test_a_path_is_laid_out_sent_and_read_for_both_head_shapes(
    row: list[float], value: float
) -> None:
    engine = TableEngine(row)
    assert isinstance(engine, StepScoringEngine)
    result = score(engine, "pq", ["a", "bc"])
    assert result.error is None and result.values == pytest.approx((value, value))
    expected = layout(lambda t: [ord(c) for c in t], "pq", ["a", "bc"], 9, 1)
    assert engine.sent == [expected] and engine.separator == 9
    assert (result.input_tokens, result.cached_tokens) == (len(expected.input_ids), 1)


def test_what_must_not_be_sent_is_answered_without_the_model() -> None:
    engine = TableEngine([0.0, 0.0], context_length=8)
    long = score(engine, "prompt", ["step"])  # 1 + 6 + 4 + 1 tokens
    assert long.values == () and long.input_tokens == 12
    assert long.error == "context overflow: 12 tokens, the PRM's context_length is 8"
    assert score(engine, "p", []) == StepValues((), 2)  # no step: nothing to read
    assert engine.sent == []


def test_failures_are_error_values_never_exceptions() -> None:
    engine = TableEngine([0.0, 0.0])
    broken = score(engine, "p", ["!"])
    assert broken == StepValues((), 4, error="the model broke")  # bos, p, !, separator
    engine = TableEngine([0.0, 0.0])
    engine.step_separator = "two tokens"
    bad = score(engine, "p", ["a"])
    assert bad.values == () and bad.input_tokens == 0
    assert "is 2 tokens" in (bad.error or "") and "exactly one" in (bad.error or "")


class CachingEngine(TableEngine):
    """A stand-in for vLLM's pooling runner with its prefix cache read: blocks of 4 tokens,
    a whole block of a path sent before is not computed again, and the rows cover only the
    tokens after the cached blocks.  Each token's logits depend on every token up to it
    (as a causal model's do), so a value read from the wrong row shows."""

    BLOCK = 4

    def __init__(self) -> None:
        super().__init__([0.0, 0.0])
        self.blocks: set[tuple[int, ...]] = set()
        self.computed = 0

    @staticmethod
    def logits(prefix: Sequence[int]) -> list[float]:
        return [0.0, (sum(i * t for i, t in enumerate(prefix, 1)) % 97) / 25 - 2]

    async def _rows(self, path: StepLayout, read_cache: bool = True) -> TokenRows | StepValues:
        self.sent.append(path)
        ids = path.input_ids
        cached = 0
        while read_cache and cached + self.BLOCK < len(ids):  # the last token is computed
            if tuple(ids[: cached + self.BLOCK]) not in self.blocks:
                break
            cached += self.BLOCK
        for end in range(self.BLOCK, len(ids) + 1, self.BLOCK):
            self.blocks.add(tuple(ids[:end]))
        self.computed += len(ids) - cached
        return TokenRows([self.logits(ids[: i + 1]) for i in range(cached, len(ids))], cached)


def test_a_child_read_from_the_cache_computes_its_step_and_gets_a_cold_passs_values() -> None:
    engine, cold = CachingEngine(), CachingEngine()
    parent, child = ["first step", "second step"], ["first step", "second step", "third"]
    score(engine, "the problem", parent)
    before = engine.computed
    got = score(engine, "the problem", child)
    want = score(cold, "the problem", child)  # nothing cached: every row computed
    assert want.cached_tokens == 0 and got.cached_tokens > 0
    assert got.values == pytest.approx(want.values) and len(set(got.values)) == 3
    # only the tokens past the parent's last whole block were computed
    assert (
        engine.computed - before == got.input_tokens - got.cached_tokens < CachingEngine.BLOCK + 7
    )


def test_a_cached_step_whose_value_was_not_kept_is_scored_cold() -> None:
    engine = CachingEngine()
    score(engine, "the problem", ["first step", "second step"])
    engine._suffix_values = None  # as after a restart: the cache holds what no value does
    got = score(engine, "the problem", ["first step", "second step", "third"])
    want = score(CachingEngine(), "the problem", ["first step", "second step", "third"])
    assert got.values == pytest.approx(want.values)
    assert [p.input_ids for p in engine.sent[-2:]] == [engine.sent[-1].input_ids] * 2  # resent
    assert got.cached_tokens == 0  # the resent request read nothing from the cache
