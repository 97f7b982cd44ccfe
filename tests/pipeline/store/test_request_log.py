"""The request log on a local disk and the replay wrappers in front of a counting policy.

No Ray here (tests/pipeline/store/test_request_replay.py runs the whole pipeline): a real
`TreeLog` in a temporary run folder, `ReplayPolicy` / `ReplayScorer` over a scripted
policy and scorer that count their calls.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from actors.progress import Counters
from actors.replay import ReplayPolicy, ReplayScorer, tree_journal
from pipeline.store.filesystem import open_store
from pipeline.store.request_log import FOLDER, RequestLogConfig, TreeLog, clean, tree_name
from search.protocols import FinishReason, Generation, GenerationRequest, Score, ScoreRequest


class Engines:
    """A policy and a scorer whose answers depend on the request only (as a seeded engine's)."""

    name = "scripted"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        self.calls += 1
        return [
            Generation(f"step {request.seed + i}", 5, FinishReason.STOP_STRING, 9)
            for i in range(request.n)
        ]

    async def count_tokens(self, text: str) -> int:
        self.calls += 1
        return len(text.split())

    async def score(self, request: ScoreRequest) -> Score:
        self.calls += 1
        turn = {"role": "assistant", "content": f"judged {len(request.path)}"}
        return Score(0.25 * len(request.path), (*(request.parent_context or ()), turn), 7, 3)


def _search(policy: Any, scorer: Any) -> list[Any]:
    """A tiny fixed "tree": three generations, a token count, two chained scores."""

    async def run() -> list[Any]:
        out: list[Any] = []
        for seed in (1, 2, 1):  # the same request twice: answered in order
            out.append(await policy.generate(GenerationRequest("p", "pre", 2, 8, (), 0.7, seed)))
        out.append(await policy.count_tokens("a b c"))
        first = await scorer.score(ScoreRequest("p", ("s1",), None, False, None, False, 10.0))
        context = first.context
        second = await scorer.score(
            ScoreRequest("p", ("s1", "s2"), context, True, "4", False, 10.0)
        )
        return [*out, first, second]

    return asyncio.run(run())


def _with_log(root: Path, engines: Engines, config: RequestLogConfig) -> tuple[list[Any], Counters]:
    counters = Counters()
    store = open_store(root)

    async def run() -> TreeLog:
        return await TreeLog.open(store, "problem-1", config)

    log = asyncio.run(run())
    with tree_journal(log):
        result = _search(ReplayPolicy(engines, counters), ReplayScorer(engines, counters))
    asyncio.run(log.close())
    return result, counters


def test_a_second_attempt_is_answered_from_the_log_without_calling_the_engines(
    tmp_path: Path,
) -> None:
    config = RequestLogConfig()
    first_engines = Engines()
    first, counters = _with_log(tmp_path, first_engines, config)
    assert first_engines.calls == 6 and counters.replayed_requests == 0
    again_engines = Engines()
    again, counters = _with_log(tmp_path, again_engines, config)
    assert again == first  # the same answers, contexts included (a tuple, as GenPRM's)
    assert again_engines.calls == 0
    assert counters.replayed_requests == 5 and counters.replayed_policy_tokens == 30
    assert counters.replayed_prm_tokens == 6


def test_a_line_cut_by_a_kill_is_skipped_and_the_rest_replayed(tmp_path: Path) -> None:
    _with_log(tmp_path, Engines(), RequestLogConfig())
    (segment,) = (tmp_path / FOLDER / tree_name("problem-1")).glob("*.jsonl")
    data = segment.read_bytes()
    segment.write_bytes(data[:-10])  # the last line (the second score) half written
    engines = Engines()
    _, counters = _with_log(tmp_path, engines, RequestLogConfig())
    assert engines.calls == 1 and counters.replayed_requests == 4


def test_the_log_is_bounded_and_cleaned(tmp_path: Path) -> None:
    _with_log(tmp_path, Engines(), RequestLogConfig(max_bytes_per_tree=200))
    (segment,) = (tmp_path / FOLDER / tree_name("problem-1")).glob("*.jsonl")
    assert 0 < segment.stat().st_size <= 200
    assert clean(open_store(tmp_path), ["problem-1", "never-logged"]) == 1
    assert not (tmp_path / FOLDER / tree_name("problem-1")).exists()


def test_without_a_journal_every_request_reaches_the_engines() -> None:
    engines, counters = Engines(), Counters()
    _search(ReplayPolicy(engines, counters), ReplayScorer(engines, counters))
    assert engines.calls == 6 and counters.replayed_requests == 0


def test_a_rerun_with_another_model_replays_nothing(tmp_path: Path) -> None:
    from actors.config import ServiceConfig
    from actors.replay import service_salt

    first = ServiceConfig.model_validate({"engine": {"kind": "sleep", "model": "a"}})
    other = ServiceConfig.model_validate({"engine": {"kind": "sleep", "model": "b"}})
    more = ServiceConfig.model_validate(
        {"engine": {"kind": "sleep", "model": "a"}, "num_replicas": 3}
    )
    assert service_salt(first) != service_salt(other)
    assert service_salt(first) == service_salt(more)  # replicas do not change answers
    store = open_store(tmp_path)

    def attempt(salt: str) -> tuple[int, int]:
        engines, counters = Engines(), Counters()

        async def run() -> None:
            log = await TreeLog.open(store, "problem-1", RequestLogConfig())
            with tree_journal(log):
                policy = ReplayPolicy(engines, counters, salt)
                await policy.generate(GenerationRequest("p", "pre", 2, 8, (), 0.7, 1))
            await log.close()

        asyncio.run(run())
        return engines.calls, counters.replayed_requests

    assert attempt(service_salt(first)) == (1, 0)
    assert attempt(service_salt(first)) == (0, 1)
    assert attempt(service_salt(other)) == (1, 0)
