"""The run's request log: what each unfinished tree has already paid for, on the run's storage.

    run=<id>/requests/<tree>/<segment>.jsonl     one line per answered request:
                                                 [key, answer]  (`actors.replay`)

`<tree>` is a hash of the problem id (any id becomes a safe name), `<segment>` one writer's
part: a search actor that starts (or restarts) a tree reads every segment of it, then
appends to a new one of its own.  On a local (or shared POSIX) disk each line is written
and flushed to the kernel as its answer arrives, so it survives the process being killed;
on object storage, which has no append, the lines go out as a new segment object every
`flush_every_s` seconds (a kill loses at most that much of the tree's log).

Bounded: a tree stops logging at `max_bytes_per_tree` (its replay then covers a prefix),
and the driver deletes a tree's log once its tree is committed (`clean`), so the folder
holds only the trees in flight.  A rerun replays a killed tree's requests
(`actors.replay`): same seed, same answers, the same tree, node for node.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

from actors.redact import redact_text
from pipeline.store.filesystem import Store

log = logging.getLogger(__name__)

FOLDER = "requests"
SUFFIX = ".jsonl"


class RequestLogConfig(BaseModel):
    """The request log that lets a rerun replay a killed tree's requests (actors.replay)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        True, description="log each tree's requests and replay them when the tree is redone"
    )
    max_bytes_per_tree: int = Field(
        64 * 2**20,
        ge=0,
        description="a tree stops logging past this many bytes (its replay covers that prefix)",
    )
    flush_every_s: float = Field(
        2.0,
        gt=0,
        description="object storage only: seconds between a tree's log segments (a local "
        "disk gets every line as it comes)",
    )


def tree_name(problem_id: str) -> str:
    return hashlib.sha256(problem_id.encode("utf-8")).hexdigest()[:32]


class TreeLog:
    """One tree's log, opened by the search actor that searches it (`actors.replay.Journal`)."""

    def __init__(self, store: Store, problem_id: str, config: RequestLogConfig) -> None:
        self.store = store.child(FOLDER, tree_name(problem_id))
        self.config = config
        self.recorded: dict[str, deque[Any]] = {}
        self.bytes = 0  # this tree's log so far, every segment
        self._buffer: list[bytes] = []
        self._file: IO[bytes] | None = None
        self._segment = ""
        self._flushed = time.monotonic()
        self._full = False
        self._flushes = 0

    @classmethod
    async def open(cls, store: Store, problem_id: str, config: RequestLogConfig) -> TreeLog:
        """Read what earlier attempts recorded (off the event loop: it is storage I/O)."""
        tree = cls(store, problem_id, config)
        await asyncio.to_thread(tree._load)
        return tree

    def _load(self) -> None:
        names = [n for n in self.store.names() if n.endswith(SUFFIX)]
        found = self.store.read_many([self.store.join(n) for n in names])
        for data in found.values():  # in the order asked (segment names sort in order)
            self.bytes += len(data)
            for line in data.splitlines():
                try:
                    key, value = json.loads(line)
                except ValueError:  # the last line of a writer killed mid-write
                    continue
                self.recorded.setdefault(key, deque()).append(value)
        # sorts after every segment already there, so segments read back in order
        self._segment = f"{len(names):06d}-{uuid.uuid4().hex[:8]}"

    @property
    def replayable(self) -> int:
        return sum(len(v) for v in self.recorded.values())

    def take(self, key: str) -> Any | None:
        answers = self.recorded.get(key)
        if not answers:
            return None
        value = answers.popleft()
        if not answers:
            del self.recorded[key]
        return value

    async def record(self, key: str, value: Any) -> None:
        if self._full:
            return
        line = (json.dumps([key, value], ensure_ascii=False) + "\n").encode("utf-8")
        if self.bytes + len(line) > self.config.max_bytes_per_tree:
            self._full = True
            log.warning(
                "request log of %s is full (%d bytes): later requests are not logged",
                self.store.name,
                self.bytes,
            )
            return
        self.bytes += len(line)
        try:
            if not self.store.remote:
                self._append(line)
                return
            self._buffer.append(line)
            if time.monotonic() - self._flushed >= self.config.flush_every_s:
                await self.flush()
        except Exception as exc:  # a log that cannot be written must never fail the tree
            self._full = True
            self._buffer = []
            log.warning(
                "request log of %s not written (%s: %s): later requests are not logged",
                self.store.name,
                type(exc).__name__,
                redact_text(exc),
            )

    def _append(self, line: bytes) -> None:
        if self._file is None:
            self.store.makedirs()
            self._file = open(self.store.local_path / f"{self._segment}{SUFFIX}", "ab")  # noqa: SIM115
        self._file.write(line)
        self._file.flush()  # to the kernel: a killed process loses nothing written

    async def flush(self) -> None:
        """Object storage: the buffered lines as the next segment object."""
        if not self._buffer:
            return
        data, self._buffer = b"".join(self._buffer), []
        self._flushed = time.monotonic()
        name = f"{self._segment}-{self._flushes:04d}{SUFFIX}"
        self._flushes += 1
        await asyncio.to_thread(self.store.write_bytes, data, name)

    async def close(self) -> None:
        """The tree ended (its records go to the driver): write what is buffered."""
        if self._file is not None:
            self._file.close()
            self._file = None
        try:
            await self.flush()
        except Exception as exc:  # as in `record`: never fail the tree
            log.warning("request log of %s not written: %s", self.store.name, redact_text(exc))


def clean(store: Store, problem_ids: Iterable[str]) -> int:
    """Delete the logs of trees that are committed; returns how many were there."""
    removed = 0
    for problem_id in problem_ids:
        tree = store.child(FOLDER, tree_name(problem_id))
        names = tree.names()
        if not names:
            continue
        tree.delete_many([tree.join(n) for n in names])
        if not store.remote:
            # not empty: a writer still appending (its tree is committed anyway)
            with contextlib.suppress(OSError):
                tree.local_path.rmdir()
        removed += 1
    return removed


def clean_done(store: Store, done: Callable[[], Iterable[str]]) -> int:
    """At a run's start and end: delete logs of trees already committed (left by a kill
    between a commit and its clean, or written by a retried attempt of a committed tree);
    `done()` (the committed problem ids) is read only if any tree is still logged."""
    present = set(store.names(FOLDER))
    if not present:
        return 0
    return clean(store, [p for p in done() if tree_name(p) in present])


def remove_if_empty(store: Store) -> None:
    """At a run's end: the local `requests/` folder goes once no tree is logged (a bucket's
    prefix is gone with its last object)."""
    if not store.remote:
        with contextlib.suppress(OSError):
            store.child(FOLDER).local_path.rmdir()
