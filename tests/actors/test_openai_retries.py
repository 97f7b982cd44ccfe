"""The OpenAI-compatible engine's retries and extra body, against a real HTTP server on
127.0.0.1 that counts the requests it gets (`tests.openai_server.FakeServer`).

One layer retries a request, the `openai` client's own, with jittered exponential
backoff: a refused request (a 4xx other than 408/409/429) is sent once, a busy server
(503) is retried a bounded number of times, and what still fails comes back marked not
retryable, so the Serve client does not send it again (retries are never multiplied).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from actors.engines.base import Sampling
from actors.engines.openai_compat import OpenAIConfig, OpenAIEngine
from actors.policy import EnginePolicy
from actors.serve import _Resilience, worth_resending
from search.protocols import FinishReason, GenerationRequest
from tests.openai_server import FakeServer, completion

SAMPLING = Sampling(max_tokens=16, stop=("\nStep",), temperature=0.7, seed=3)


@dataclass
class Counting:
    """What the server answers (`status`, `headers`) and what it got: every completion
    request's body and arrival time."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    text: str = "Step 1: 2 + 2 = 4."
    bodies: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def respond(self, path: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        if path == "/tokenize":
            return 200, {"tokens": list(range(len(str(body.get("content", "")).split())))}
        if path == "/apply-template":
            return 200, {"prompt": "\n".join(str(m["content"]) for m in body["messages"])}
        with self.lock:
            self.bodies.append(dict(body))
            self.times.append(time.monotonic())
        if self.status != 200:
            error = {"error": {"message": f"status {self.status}", "code": self.status}}
            return self.status, error, self.headers
        choice = {"text": self.text, "finish_reason": "stop", "stop_reason": None}
        return 200, completion(choice, 8)


@pytest.fixture()
def server() -> Iterator[tuple[Counting, FakeServer]]:
    state = Counting()
    fake = FakeServer(state.respond)
    yield state, fake
    fake.close()


def _engine(url: str, **config: Any) -> OpenAIEngine:
    """Built from its config, as a replica builds it (`OpenAIConfig.build`)."""
    return OpenAIConfig(base_url=f"{url}/v1", model="m", api_key_env=None, **config).build()


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_a_refused_request_is_sent_once(
    server: tuple[Counting, FakeServer], status: int
) -> None:
    state, fake = server
    state.status = status
    engine = _engine(fake.url, max_retries=3)
    result = await engine.complete("What is 2 + 2?", SAMPLING)
    await engine.close()
    assert len(state.bodies) == 1
    assert result.finish is FinishReason.ERROR and f"status {status}" in (result.error or "")
    assert not result.retryable  # nor does the Serve client send it again


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503])
async def test_a_transient_failure_is_retried_a_bounded_number_of_times(
    server: tuple[Counting, FakeServer], status: int
) -> None:
    """408 (the server timed out waiting) and 429 (rate limited) are retried like a 5xx:
    they say "later", not "never"; the server's Retry-After (here 20 ms) sets the wait."""
    state, fake = server
    state.status, state.headers = status, {"Retry-After-Ms": "20"}
    engine = _engine(fake.url, max_retries=4)
    result = await engine.complete("What is 2 + 2?", SAMPLING)
    await engine.close()
    assert len(state.bodies) == 1 + 4
    assert result.finish is FinishReason.ERROR and not result.retryable


async def test_a_busy_server_is_retried_with_jittered_exponential_backoff(
    server: tuple[Counting, FakeServer], caplog: pytest.LogCaptureFixture
) -> None:
    """No Retry-After: the client's own backoff, 0.5 s then 1 s, each cut by up to a
    quarter at random.  The waits are read from the client's log (what it chose, not
    what a loaded machine made of it); the server saw the requests at least that far
    apart."""
    state, fake = server
    state.status = 503
    waits: list[list[float]] = []
    for _ in range(2):
        state.bodies.clear()
        state.times.clear()
        caplog.clear()
        engine = _engine(fake.url, max_retries=2)
        with caplog.at_level(logging.INFO, logger="openai._base_client"):
            result = await engine.complete("What is 2 + 2?", SAMPLING)
        await engine.close()
        assert result.finish is FinishReason.ERROR and not result.retryable
        assert len(state.bodies) == 3
        chosen = [
            float(m.group(1))
            for r in caplog.records
            if (m := re.match(r"Retrying request in ([\d.]+) seconds", r.getMessage()))
        ]
        assert len(chosen) == 2, caplog.text
        for wait, base in zip(chosen, (0.5, 1.0), strict=True):
            assert 0.75 * base <= wait <= base, chosen
        gaps = [b - a for a, b in zip(state.times, state.times[1:], strict=False)]
        assert all(gap >= wait - 0.01 for gap, wait in zip(gaps, chosen, strict=True))
        waits.append(chosen)
    assert waits[0] != waits[1]  # drawn at random: two runs do not wait alike


async def test_extra_body_from_the_config_arrives_in_every_request(
    server: tuple[Counting, FakeServer],
) -> None:
    state, fake = server
    engine = _engine(fake.url, extra_body={"add_special_tokens": False, "min_p": 0.05})
    await engine.complete("What is 2 + 2?", SAMPLING)
    await engine.complete("What is 3 + 3?", SAMPLING)
    await engine.close()
    assert len(state.bodies) == 2
    for body in state.bodies:
        assert body["add_special_tokens"] is False and body["min_p"] == 0.05
        # the search's own fields are the engine's
        assert body["stop"] == ["\nStep"] and body["seed"] == 3 and body["max_tokens"] == 16


def test_extra_body_cannot_replace_what_the_engine_sets() -> None:
    with pytest.raises(ValidationError, match=r"extra_body\n.*seed, stop: set by the engine"):
        OpenAIConfig(
            base_url="http://127.0.0.1:1/v1", model="m", extra_body={"stop": [], "seed": 1}
        )
    with pytest.raises(ValidationError, match="extra_body"):
        OpenAIConfig(base_url="http://127.0.0.1:1/v1", model="m", extra_body={"x": object()})
    with pytest.raises(ValidationError, match="max_retries"):
        OpenAIConfig(base_url="http://127.0.0.1:1/v1", model="m", max_retries=-1)


async def test_the_serve_client_resends_only_what_the_engine_did_not_retry(
    server: tuple[Counting, FakeServer],
) -> None:
    """What the Serve client (`actors.serve.ServePolicy`) decides on a replica's answer,
    here on the answers of the real policy over the real engine: a refused or busy
    server's failure is final (the engine's client already did what retrying helps), an
    empty completion (a 200 with nothing in it, the engine's own rule) is still sent
    again."""
    state, fake = server
    policy = EnginePolicy(_engine(fake.url, max_retries=1))
    request = GenerationRequest("What is 2 + 2?", "", 2, 16, ("\nStep",), 0.7, 5)
    for status, resend in ((400, False), (503, False), (200, True)):
        state.status, state.headers, state.text = status, {"Retry-After-Ms": "10"}, ""
        state.bodies.clear()
        generations = await policy.generate(request)
        assert all(g.finish is FinishReason.ERROR for g in generations)
        assert worth_resending(generations) is resend, status
        assert len(state.bodies) == 2 * (2 if status == 503 else 1)
    await policy.engine.close()  # type: ignore[attr-defined]


async def test_the_serve_clients_retries_wait_with_jitter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`_Resilience` (the Serve client's retries of a lost replica's calls): each wait is
    drawn from the upper half of its doubling step, so actors that failed together do not
    come back together.  The waits are read from its log line, not timed."""
    attempts = 0

    async def failing() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("replica lost")

    runs: list[list[float]] = []
    for _ in range(2):
        caplog.clear()
        attempts = 0
        with (
            caplog.at_level(logging.WARNING, logger="actors.serve"),
            pytest.raises(ConnectionError),
        ):
            await _Resilience(timeout_s=5, retries=3, backoff_s=0.02).call("call", failing)
        assert attempts == 4
        waits = [float(w) for w in re.findall(r"retry \d in ([\d.]+)s", caplog.text)]
        assert len(waits) == 3, caplog.text
        for wait, base in zip(waits, (0.02, 0.04, 0.08), strict=True):
            assert 0.5 * base <= wait <= base, waits
        runs.append(waits)
    assert runs[0] != runs[1]


@pytest.mark.integration
async def test_through_serve_a_request_is_retried_by_one_layer_only(
    ray_cluster: None, server: tuple[Counting, FakeServer]
) -> None:
    """The policy deployment on a real local Ray cluster, its replica's engine calling the
    counting server.  Before, the Serve client sent every failed request again whatever
    the engine had done: a 400 reached the server 1 + 2 times and a 503 (1 + 1) x (1 + 2)
    times.  Now the engine's client is the one layer that retries an HTTP failure; the
    Serve client still sends an empty completion again (the engine's own rule)."""
    from actors.config import ServiceConfig
    from actors.serve import deploy_policy

    state, fake = server
    engine = OpenAIConfig(base_url=f"{fake.url}/v1", model="m", api_key_env=None, max_retries=1)
    service = ServiceConfig(engine=engine, max_retries=2, retry_backoff_s=0.05)
    policy = deploy_policy(service, app="retries")
    request = GenerationRequest("What is 2 + 2?", "", 1, 16, ("\nStep",), 0.7, 5)
    for status, expected in ((400, 1), (503, 1 + 1), (200, 1 + 2)):
        state.status, state.headers, state.text = status, {"Retry-After-Ms": "10"}, ""
        state.bodies.clear()
        (generation,) = await policy.generate(request)
        assert generation.finish is FinishReason.ERROR
        assert len(state.bodies) == expected, (status, len(state.bodies))
