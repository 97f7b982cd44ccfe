"""Coalesced requests: many callers' requests leave a process in one call.

A search actor with 64 trees sends hundreds of small requests per second to each
deployment.  Sent one by one, each pays a Serve handle call (a router hop, an
asyncio future and a cross-thread future in the caller, an actor task in the
replica): that per-call cost, not the search, was most of the pipeline's CPU.
`Coalescer` collects the requests that arrive within `window_s` (or until
`max_batch` are waiting) and hands them to `send` as one list; each caller gets
its own future back.

No request waits for its neighbours: `send` may return an async iterator of
groups (lists) of `(index, result)` pairs that the replica yields as requests
finish (`fan_out_stream`: each group holds what had finished by then), so a long
completion in a call does not hold the short ones (a head-of-line barrier that
made one slow tree slow down every tree coalesced with it:
tests/pipeline/run/test_continuous_trees.py), and results that finish together share
one stream item.

Per-request semantics are kept: `send` returns one entry per request, and an
entry that is a `RequestFailed` fails only that caller's future; a whole call
that raises (replica died, network) fails every caller of that call, each with
its own exception, and each caller's retry layer decides on its own.  A caller
that gave up (its timeout cancelled the future) is skipped when the results come.

Requests are grouped by a key (the tree's affinity bucket, when routing by tree:
`actors.affinity.bucket`): one call holds requests of one key only, so the key can
route the whole call.

`submit` returns a plain future, not a coroutine: awaiting it under
`asyncio.wait_for` creates no extra task.  No Ray and no I/O here; the Serve
clients in `actors.serve` plug the deployment call in as `send`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from common.redact import redact_text

Req = TypeVar("Req")
Res = TypeVar("Res")


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """One request of a coalesced call failed (the others did not): why, as text."""

    message: str


class CoalescedRequestError(RuntimeError):
    """This request failed inside a coalesced call (its neighbours may have succeeded)."""


# Either all results at once, or a stream of [(index, result), ...] groups as requests finish.
Send = Callable[[Hashable, list[Req]], Any]


class Coalescer(Generic[Req, Res]):
    """Collects requests per key for `window_s` (at most `max_batch`), sends each group once."""

    def __init__(self, send: Send[Req], *, window_s: float, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._send = send
        self.window_s = window_s
        self.max_batch = max_batch
        self._pending: dict[Hashable, list[tuple[Req, asyncio.Future[Res]]]] = {}
        self._in_flight: set[asyncio.Task[None]] = set()  # strong references until done
        self.calls = 0  # coalesced calls sent (for benchmarks and tests)
        self.requests = 0

    def submit(self, request: Req, key: Hashable = None) -> asyncio.Future[Res]:
        """Queue `request`; the future resolves to its own result (or its own error)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Res] = loop.create_future()
        group = self._pending.get(key)
        if group is None:
            group = self._pending[key] = []
            # window 0 still gathers everything submitted in this turn of the loop
            # (the k children of a leaf are scored by one gather: one call)
            if self.window_s > 0:
                loop.call_later(self.window_s, self._flush, key, group)
            else:
                loop.call_soon(self._flush, key, group)
        group.append((request, future))
        if len(group) >= self.max_batch:
            self._flush(key, group)
        return future

    def _flush(self, key: Hashable, group: list[tuple[Req, asyncio.Future[Res]]]) -> None:
        if self._pending.get(key) is not group:
            return  # already sent (it filled up before its window ended)
        del self._pending[key]
        task = asyncio.get_running_loop().create_task(self._send_group(key, group))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _send_group(
        self, key: Hashable, group: list[tuple[Req, asyncio.Future[Res]]]
    ) -> None:
        live = [(r, f) for r, f in group if not f.done()]  # callers that timed out are gone
        if not live:
            return
        self.calls += 1
        self.requests += len(live)
        try:
            sent = self._send(key, [r for r, _ in live])
            if hasattr(sent, "__aiter__"):
                await self._settle_stream(sent, live)
                return
            results = await sent
            if len(results) != len(live):
                raise CoalescedRequestError(
                    f"coalesced call returned {len(results)} results for {len(live)} requests"
                )
        except asyncio.CancelledError:
            for _, future in live:
                future.cancel()
            raise
        except Exception as exc:
            _fail_all(live, redact_text(f"coalesced call failed: {type(exc).__name__}: {exc}"))
            return
        for (_, future), result in zip(live, results, strict=True):
            _settle(future, result)

    async def _settle_stream(
        self,
        stream: AsyncIterator[Sequence[tuple[int, Any]]],
        live: list[tuple[Req, asyncio.Future[Res]]],
    ) -> None:
        """Each caller's future resolves the moment the group holding its result arrives
        (a stream that fails or is cancelled is handled by `_send_group`, like a call)."""
        async for group in stream:
            for index, result in group:
                _settle(live[index][1], result)
        _fail_all(live, "coalesced call ended without a result for this request")


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if future.done():  # the caller gave up (timeout) meanwhile
        return
    if isinstance(result, RequestFailed):
        future.set_exception(CoalescedRequestError(result.message))
    else:
        future.set_result(result)


def _fail_all(live: Sequence[tuple[Any, asyncio.Future[Any]]], message: str) -> None:
    for _, future in live:
        if not future.done():
            future.set_exception(CoalescedRequestError(message))


async def fan_out_stream(
    handle_one: Callable[[Req], Awaitable[Res]],
    requests: Sequence[Req],
    *,
    linger_s: float = 0.0,
) -> AsyncIterator[list[tuple[int, Res | RequestFailed]]]:
    """Server side of a coalesced call: every request at once (so the engine batches
    them), results yielded in groups of `(index, result)`, a failure in its own slot.

    A group is everything that has finished when the stream is next read, so a
    short request never waits for a long one (no head-of-line barrier), while
    results that finish together travel as one stream item: each item costs Serve
    (a generator step in the replica, an object and a future in the caller) about
    as much as a whole call, so one item per request gave back most of what
    coalescing saved.  With `linger_s` > 0 the first result of a group waits that
    long for others (at most that long: never for a request still running after it).
    """
    loop = asyncio.get_running_loop()
    finished: list[tuple[int, Res | RequestFailed]] = []
    wake: list[asyncio.Future[None]] = []  # the reader's wake-up, while it waits

    async def one(index: int, request: Req) -> None:
        try:
            result: Res | RequestFailed = await handle_one(request)
        except Exception as exc:
            # crosses to the client (its retry warning, the node's error): no credentials
            result = RequestFailed(redact_text(f"{type(exc).__name__}: {exc}"))
        finished.append((index, result))
        if wake and not wake[0].done():
            wake[0].set_result(None)

    tasks = [loop.create_task(one(i, r)) for i, r in enumerate(requests)]
    remaining = len(tasks)
    try:
        while remaining:
            if not finished:
                wake[:] = [loop.create_future()]
                await wake[0]
                wake.clear()
            if linger_s > 0 and len(finished) < remaining:
                await asyncio.sleep(linger_s)
            group = finished[:]
            del finished[:]
            remaining -= len(group)
            yield group
    finally:  # the caller went away (cancelled, replica shutting down): stop the rest
        for task in tasks:
            if not task.done():
                task.cancel()
