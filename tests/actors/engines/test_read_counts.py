"""An engine's token counts are checked where they enter (`actors.engines.read_counts`).

A real OpenAI-compatible HTTP server on 127.0.0.1 (`tests.openai_server.FakeServer`)
answers with a ``usage`` that cannot be: more prompt tokens served from the cache than
were sent, negative counts, counts that are no numbers.  The engine's answer holds
counts that can be, the log says so once per engine and fault, and the answer says
which faults its counts had (`count_faults`: what the run counts and reports).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from actors.engines import read_counts
from actors.engines.base import Completion, Sampling, StepValues
from actors.engines.llamacpp import LlamaCppEngine
from actors.engines.openai_compat import OpenAIConfig
from search.protocols import FinishReason
from tests.openai_server import FakeServer, completion

SAMPLING = Sampling(max_tokens=16, stop=(), temperature=0.0, seed=3)
LOGGER = "actors.engines.read_counts"


@dataclass
class Lying:
    """A server whose `usage` is whatever the test sets."""

    usage: dict[str, Any] = field(default_factory=dict)

    def respond(self, path: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        answer = completion({"text": "4.", "finish_reason": "stop", "stop_reason": None}, 2)
        answer["usage"] = self.usage
        return 200, answer


@pytest.fixture()
def server() -> Iterator[tuple[Lying, FakeServer]]:
    state = Lying()
    fake = FakeServer(state.respond)
    yield state, fake
    fake.close()


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_counts, "_WARNED", set())


async def _complete(url: str, usage: dict[str, Any], state: Lying) -> Completion:
    state.usage = usage
    engine = OpenAIConfig(base_url=f"{url}/v1", model="m", api_key_env=None).build()
    try:
        return await engine.complete("What is 2 + 2?", SAMPLING)
    finally:
        await engine.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


async def test_cached_above_sent_is_clamped_and_said_once_naming_the_engine(
    server: tuple[Lying, FakeServer], caplog: pytest.LogCaptureFixture
) -> None:
    # summed into the trees, such answers gave the report a hit rate of 250%
    state, fake = server
    usage = {"prompt_tokens": 100, "completion_tokens": 2}
    usage["prompt_tokens_details"] = {"cached_tokens": 250}  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first = await _complete(fake.url, usage, state)
        second = await _complete(fake.url, usage, state)
    assert (first.input_tokens, first.cached_tokens) == (100, 100)
    assert (second.input_tokens, second.cached_tokens) == (100, 100)
    # logged once, but each answer says so: the run counts both
    assert first.count_faults == second.count_faults == {"cached_above_sent"}
    said = _warnings(caplog)
    assert len(said) == 1, said
    assert said[0].startswith("actors.engines.openai_compat: the engine reported 250 prompt ")
    assert "of 100 sent; clamped" in said[0]


@pytest.mark.parametrize(
    ("usage", "expected", "fault", "kind"),
    [
        (
            {"prompt_tokens": -40, "completion_tokens": 2},
            (0, 0, 2),
            "prompt tokens -40",
            "negative",
        ),
        (
            {"prompt_tokens": 50, "completion_tokens": -3},
            (50, 0, 0),
            "output tokens -3",
            "negative",
        ),
        (
            {
                "prompt_tokens": 50,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": -9},
            },
            (50, 0, 2),
            "cached prompt tokens -9",
            "negative",
        ),
        (
            {
                "prompt_tokens": 50,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": "lots"},
            },
            (50, 0, 2),
            "cached prompt tokens 'lots', no count",
            "not_a_number",
        ),
        (
            {"prompt_tokens": 50.5, "completion_tokens": 2},
            (0, 0, 2),
            "prompt tokens 50.5, no count",
            "not_a_number",
        ),
    ],
)
# the openai client's own models warn when they hold what their type does not say
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
async def test_counts_that_cannot_be_are_clamped_to_counts_that_can(
    server: tuple[Lying, FakeServer],
    caplog: pytest.LogCaptureFixture,
    usage: dict[str, Any],
    expected: tuple[int, int, int],
    fault: str,
    kind: str,
) -> None:
    state, fake = server
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        answer = await _complete(fake.url, usage, state)
    assert (answer.input_tokens, answer.cached_tokens, answer.output_tokens) == expected
    assert answer.count_faults == {kind}
    assert answer.finish is not FinishReason.ERROR  # the text itself is fine
    said = _warnings(caplog)
    assert any(fault in line for line in said), said


def test_every_engines_answer_is_checked_as_it_is_made() -> None:
    # the contract's own types, so an engine added later is covered too
    values = StepValues((0.5,), input_tokens=10, cached_tokens=40)
    assert (values.input_tokens, values.cached_tokens) == (10, 10)
    assert values.count_faults == {"cached_above_sent"}
    answer = Completion("x", -1, FinishReason.EOS, input_tokens=-5, cached_tokens=3)
    assert (answer.input_tokens, answer.cached_tokens, answer.output_tokens) == (0, 0, 0)
    # the prompt read as 0, so its 3 cached tokens were more than it: both faults
    assert answer.count_faults == {"negative", "cached_above_sent"}
    fine = Completion("x", 3, FinishReason.EOS, input_tokens=20, cached_tokens=16)
    assert (fine.input_tokens, fine.cached_tokens, fine.output_tokens) == (20, 16, 3)
    assert fine.count_faults == frozenset()
    # what the engine found before it made the answer is kept with what the answer finds
    found = Completion("x", 3, FinishReason.EOS, 20, count_faults=frozenset({"negative"}))
    assert found.count_faults == {"negative"}
    both = StepValues((), "seven", 9, count_faults={"negative"})  # type: ignore[arg-type]
    assert both.count_faults == {"negative", "not_a_number", "cached_above_sent"}
    assert isinstance(both.count_faults, frozenset)  # the answer stays hashable
    hash(both)


def test_llamacpps_timings_feed_the_hit_rate_only_as_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """llama.cpp's answer parsed by the engine's own method on a stand-in for the engine
    object (a fake: a real llama.cpp server cannot be made to report such timings); its
    counters are what `load()` and admission's hit rate read."""
    engine = SimpleNamespace(prompt_tokens_evaluated=0, prompt_tokens_cached=0, tokens_generated=0)
    data = {
        "content": "4.",
        "tokens_predicted": 2,
        "tokens_evaluated": 30,
        "stop_type": "eos",
        "timings": {"prompt_n": -7, "cache_n": 90},
    }
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        answer = LlamaCppEngine._completion(engine, data, 16)  # type: ignore[arg-type]
    assert (answer.input_tokens, answer.cached_tokens) == (30, 30)
    assert (engine.prompt_tokens_evaluated, engine.prompt_tokens_cached) == (0, 30)
    seen = engine.prompt_tokens_evaluated + engine.prompt_tokens_cached
    assert 0 <= engine.prompt_tokens_cached / seen <= 1
    assert len(_warnings(caplog)) == 2  # cached above sent; computed prompt tokens below 0
    assert answer.count_faults == {"cached_above_sent", "negative"}
    broken = dict(data, timings="not a mapping", tokens_evaluated="many")
    answer = LlamaCppEngine._completion(engine, broken, 16)  # type: ignore[arg-type]
    assert (answer.input_tokens, answer.cached_tokens, answer.output_tokens) == (0, 0, 2)
    assert answer.count_faults == {"not_a_number"}


def test_vllms_cache_reads_feed_its_hit_rate_only_as_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """vLLM's request output parsed by the engine's own method, on stand-ins for the
    engine object and vLLM's `RequestOutput` (fakes: vLLM does not run on this machine's
    CPU, nor can a real one be made to report more cached tokens than its prompt)."""
    from actors.engines.vllm_engine import VLLMEngine

    engine = SimpleNamespace(
        prompt_tokens_seen=0, cached_tokens_seen=0, _top_logprobs=lambda positions, k: ()
    )
    output = SimpleNamespace(
        token_ids=[5, 6], finish_reason="stop", stop_reason=None, text="4.", logprobs=None
    )
    result = SimpleNamespace(outputs=[output], prompt_token_ids=list(range(10)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for cached, fault in ((40, "cached_above_sent"), (-3, "negative")):
            result.num_cached_tokens = cached
            answer = VLLMEngine._completion(engine, result, 16, 0)  # type: ignore[arg-type]
            assert 0 <= answer.cached_tokens <= answer.input_tokens == 10
            assert answer.count_faults == {fault}
    assert (engine.prompt_tokens_seen, engine.cached_tokens_seen) == (20, 10)
    assert len(_warnings(caplog)) == 2
