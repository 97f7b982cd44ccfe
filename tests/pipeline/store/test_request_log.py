"""The request log on a local disk and the replay wrappers in front of a counting policy.

No Ray here (tests/pipeline/store/test_request_replay.py runs the whole pipeline): a real
`TreeLog` in a temporary run folder, `ReplayPolicy` / `ReplayScorer` over a scripted
policy and scorer that count their calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

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
    assert counters.replayed_requests == 5 and counters.replayed_policy_output_tokens == 30
    assert counters.replayed_prm_output_tokens == 6


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

    first = ServiceConfig.model_validate({"engine": {"kind": "load_model", "model": "a"}})
    other = ServiceConfig.model_validate({"engine": {"kind": "load_model", "model": "b"}})
    more = ServiceConfig.model_validate(
        {"engine": {"kind": "load_model", "model": "a"}, "num_replicas": 3}
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


def _two_segments(root: Path, config: RequestLogConfig) -> tuple[Path, Path]:
    """A tree logged by two attempts: the first one's segment, then the second one's."""
    _with_log(root, Engines(), config)  # the whole fixed tree in one segment
    first = next((root / FOLDER / tree_name("problem-1")).glob("*.jsonl"))
    store = open_store(root)
    engines = Engines()

    async def second() -> None:  # one more request, its own segment
        log = await TreeLog.open(store, "problem-1", config)
        with tree_journal(log):
            policy = ReplayPolicy(engines, Counters())
            await policy.generate(GenerationRequest("p", "pre", 2, 8, (), 0.7, 77))
        await log.close()

    asyncio.run(second())
    (other,) = set((root / FOLDER / tree_name("problem-1")).glob("*.jsonl")) - {first}
    return first, other


def test_a_folder_where_a_segment_was_is_skipped_with_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Object stores and FUSE mounts leave "folder" entries: one in a segment file's place
    is neither read nor deleted, the run goes on, and the warnings name it."""
    first, other = _two_segments(tmp_path, RequestLogConfig())
    first.unlink()
    first.mkdir()  # a folder where the segment file was
    (first / "x").write_text("not a segment")
    engines = Engines()
    with caplog.at_level(logging.WARNING, logger="pipeline.store.request_log"):
        _, counters = _with_log(tmp_path, engines, RequestLogConfig())
        # the second attempt's segment still replays; the first's requests go to the engines
        assert engines.calls == 6 and counters.replayed_requests == 0
        assert f"{first} cannot be read (IsADirectoryError" in caplog.text
        caplog.clear()
        assert clean(open_store(tmp_path), ["problem-1"]) == 1
    assert f"{first} cannot be deleted (IsADirectoryError" in caplog.text
    assert first.is_dir() and not other.exists()  # what could go, went
    assert [p.name for p in first.parent.iterdir()] == [first.name]


def test_garbage_in_a_segment_is_skipped_and_the_engines_asked(tmp_path: Path) -> None:
    """Lines a writer never wrote (not JSON, the wrong shape, nested past Python's
    recursion limit, a recorded answer under its real key claiming more tokens than the
    request allowed) are not replayed: the tree's requests go to the engines."""
    _with_log(tmp_path, Engines(), RequestLogConfig())
    (segment,) = (tmp_path / FOLDER / tree_name("problem-1")).glob("*.jsonl")
    lines = segment.read_bytes().splitlines()
    key, value = json.loads(lines[0])  # the first generation request's answer
    value[0][1] = 10**9  # its output tokens
    garbage = [
        b"\x00\xffnot json",
        b"[1, 2, 3]",
        b"5",
        b'[["a"], 1]',
        b"[" * 50_000 + b"]" * 50_000,
        json.dumps([key, value]).encode(),
        json.dumps([key, "a string"]).encode(),
    ]
    segment.write_bytes(b"\n".join(garbage + lines[1:]) + b"\n")
    engines = Engines()
    again, counters = _with_log(tmp_path, engines, RequestLogConfig())
    first, _ = _with_log(tmp_path / "fresh", Engines(), RequestLogConfig())
    assert again == first
    # the first request (its answers spoilt) and its repeat go to the engine
    assert engines.calls == 2 and counters.replayed_requests == 3


def test_a_folder_key_where_a_segment_object_was_on_a_bucket(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on object storage: a "folder" key (`<segment>/`) where a segment object
    was is skipped with a warning, the other segments replay and `clean` goes through."""
    from tests.s3_server import S3Server

    bucket = "request-logs"
    with S3Server() as s3, s3.empty_bucket(bucket, monkeypatch.setenv):
        store = open_store(f"s3://{bucket}/run=x")
        config = RequestLogConfig(flush_every_s=1e9)  # one object per attempt, at close

        def attempt(seed: int) -> tuple[int, int]:
            engines, counters = Engines(), Counters()

            async def run() -> None:
                log = await TreeLog.open(store, "problem-1", config)
                with tree_journal(log):
                    policy = ReplayPolicy(engines, counters)
                    await policy.generate(GenerationRequest("p", "pre", 2, 8, (), 0.7, seed))
                await log.close()

            asyncio.run(run())
            return engines.calls, counters.replayed_requests

        assert attempt(1) == (1, 0) and attempt(2) == (1, 0)
        prefix = f"run=x/{FOLDER}/{tree_name('problem-1')}/"
        first, second = s3.keys(bucket, prefix)
        client = s3.client()
        client.delete_object(Bucket=bucket, Key=first)
        client.put_object(Bucket=bucket, Key=first + "/", Body=b"")  # the "folder" key
        with caplog.at_level(logging.WARNING, logger="pipeline.store.request_log"):
            assert attempt(2) == (0, 1)  # the second segment replays
            assert attempt(1) == (1, 0)  # the first segment's request is asked anew
            assert f"s3://{bucket}/{first} cannot be read" in caplog.text
            clean(store, ["problem-1"])
        assert second not in s3.keys(bucket, prefix)
