"""`Coalescer` on its own (pure asyncio, no Ray): grouping, limits and per-request errors.

`send` here is a plain coroutine standing in for the deployment call, the one thing
that needs Ray; the Serve path is tested in `test_coalesce_affinity.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import pytest

from actors.coalesce import (
    CoalescedRequestError,
    Coalescer,
    RequestFailed,
    fan_out_stream,
)


class _Recorder:
    def __init__(self, fail: frozenset[int] = frozenset(), raise_call: bool = False) -> None:
        self.calls: list[tuple[Hashable, list[int]]] = []
        self.fail = fail
        self.raise_call = raise_call

    async def __call__(self, key: Hashable, requests: list[int]) -> list[int | RequestFailed]:
        self.calls.append((key, list(requests)))
        await asyncio.sleep(0)
        if self.raise_call:
            raise ConnectionError("replica died")
        return [RequestFailed(f"bad {r}") if r in self.fail else r * 10 for r in requests]


async def test_requests_in_one_window_share_one_call_and_get_their_own_results() -> None:
    send = _Recorder()
    batches = Coalescer(send, window_s=0.01, max_batch=64)
    results = await asyncio.gather(*(batches.submit(i) for i in range(20)))
    assert results == [i * 10 for i in range(20)]
    assert send.calls == [(None, list(range(20)))]


async def test_max_batch_splits_and_keys_never_mix() -> None:
    send = _Recorder()
    batches = Coalescer(send, window_s=0.01, max_batch=4)
    futures = [batches.submit(i, key=f"tree{i % 2}") for i in range(10)]
    assert await asyncio.gather(*futures) == [i * 10 for i in range(10)]
    assert all(len(requests) <= 4 for _, requests in send.calls)
    for key, requests in send.calls:
        assert {f"tree{r % 2}" for r in requests} == {key}
    assert sorted(r for _, requests in send.calls for r in requests) == list(range(10))


async def test_window_zero_still_catches_what_arrives_in_the_same_turn() -> None:
    send = _Recorder()
    batches = Coalescer(send, window_s=0.0, max_batch=64)
    assert await asyncio.gather(*(batches.submit(i) for i in range(3))) == [0, 10, 20]
    assert len(send.calls) == 1


async def test_one_failed_request_fails_only_its_own_caller() -> None:
    batches = Coalescer(_Recorder(fail=frozenset({3})), window_s=0.01, max_batch=64)
    results = await asyncio.gather(*(batches.submit(i) for i in range(6)), return_exceptions=True)
    assert [r for i, r in enumerate(results) if i != 3] == [0, 10, 20, 40, 50]
    assert isinstance(results[3], CoalescedRequestError) and "bad 3" in str(results[3])


async def test_a_failed_call_fails_each_caller_with_its_own_exception() -> None:
    batches = Coalescer(_Recorder(raise_call=True), window_s=0.01, max_batch=64)
    results = await asyncio.gather(*(batches.submit(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, CoalescedRequestError) for r in results)
    assert "ConnectionError: replica died" in str(results[0])
    assert len({id(r) for r in results}) == 3


async def test_a_caller_that_timed_out_is_left_out_of_the_call() -> None:
    send = _Recorder()
    batches = Coalescer(send, window_s=0.05, max_batch=64)
    impatient = batches.submit(1)
    patient = batches.submit(2)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(impatient, 0.001)
    assert await patient == 20
    assert send.calls == [(None, [2])]


async def test_fan_out_runs_requests_concurrently_and_reports_failures_in_place() -> None:
    running = 0
    peak = 0

    async def handle(x: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        if x == 2:
            raise ValueError("no")
        return x

    results = dict([item async for group in fan_out_stream(handle, [0, 1, 2, 3]) for item in group])
    assert [results[0], results[1], results[3]] == [0, 1, 3]
    assert results[2] == RequestFailed("ValueError: no")
    assert peak == 4  # all at once: the engine sees them together and batches them


async def test_a_streamed_call_resolves_each_caller_when_its_own_result_arrives() -> None:
    """A slow request in a coalesced call must not hold a fast one (head-of-line)."""
    release_slow = asyncio.Event()

    async def handle(request: str) -> str:
        if request == "slow":
            await release_slow.wait()
        return request.upper()

    def send(key: object, requests: list[str]) -> Any:
        return fan_out_stream(handle, requests)

    coalescer: Coalescer[str, str] = Coalescer(send, window_s=0.0, max_batch=8)
    slow = coalescer.submit("slow")
    fast = coalescer.submit("fast")
    assert await asyncio.wait_for(fast, 2.0) == "FAST"
    assert not slow.done()  # same call, still running
    release_slow.set()
    assert await asyncio.wait_for(slow, 2.0) == "SLOW"
    assert coalescer.calls == 1


async def test_results_that_finish_together_share_one_stream_item() -> None:
    async def handle(x: int) -> int:
        await asyncio.sleep(0.01 if x < 6 else 0.2)
        return x * 10

    groups = [group async for group in fan_out_stream(handle, list(range(8)))]
    assert [sorted(groups[0]), sorted(groups[1])] == [
        [(i, i * 10) for i in range(6)],
        [(6, 60), (7, 70)],
    ]


async def test_a_grouped_stream_gives_each_caller_its_own_result_or_its_own_failure() -> None:
    async def handle(request: int) -> int:
        await asyncio.sleep(0.001 * (request % 4))  # several groups
        if request == 5:
            raise ValueError("bad five")
        return request * 10

    def send(key: object, requests: list[int]) -> Any:
        return fan_out_stream(handle, requests)

    coalescer: Coalescer[int, int] = Coalescer(send, window_s=0.01, max_batch=64)
    futures = [coalescer.submit(i) for i in range(12)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert coalescer.calls == 1
    assert [r for i, r in enumerate(results) if i != 5] == [i * 10 for i in range(12) if i != 5]
    assert isinstance(results[5], CoalescedRequestError)
    assert "ValueError: bad five" in str(results[5])


async def test_a_fast_caller_resolves_while_a_slow_neighbour_runs_even_with_a_linger() -> None:
    """The linger holds a finished result at most `linger_s`, never until a slow one ends."""
    release_slow = asyncio.Event()

    async def handle(request: str) -> str:
        if request == "slow":
            await release_slow.wait()
        return request.upper()

    def send(key: object, requests: list[str]) -> Any:
        return fan_out_stream(handle, requests, linger_s=0.005)

    coalescer: Coalescer[str, str] = Coalescer(send, window_s=0.0, max_batch=8)
    slow = coalescer.submit("slow")
    fast = [coalescer.submit(f"fast{i}") for i in range(3)]
    assert await asyncio.wait_for(asyncio.gather(*fast), 1.0) == ["FAST0", "FAST1", "FAST2"]
    assert not slow.done()
    release_slow.set()
    assert await asyncio.wait_for(slow, 2.0) == "SLOW"
    assert coalescer.calls == 1


async def test_a_stream_closed_early_cancels_the_requests_still_running() -> None:
    cancelled = asyncio.Event()

    async def handle(request: str) -> str:
        if request == "slow":
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return request

    stream = fan_out_stream(handle, ["fast", "slow"])
    assert await anext(stream) == [(0, "fast")]
    await stream.aclose()
    await asyncio.wait_for(cancelled.wait(), 1.0)
