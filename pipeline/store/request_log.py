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

The log is a saving, not a record: nothing in it may stop a run.  An entry that cannot be
listed, read, written or deleted (a folder where a segment file was, as object stores and
FUSE mounts leave; a line that is not an answer) is skipped with a warning naming it, and
the tree's requests it held go to the engines again.  The run's own outputs (Parquet,
run.json) never pass through here, so their failures still stop the run.
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

from pydantic import Field

from common.redact import redact_text
from pipeline.store.filesystem import Store
from search.strict_config import StrictConfig

log = logging.getLogger(__name__)

FOLDER = "requests"
SUFFIX = ".jsonl"


class RequestLogConfig(StrictConfig):
    """The request log that lets a rerun replay a killed tree's requests (actors.replay)."""

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
        names = [n for n in _names(self.store) if n.endswith(SUFFIX)]
        for data in _read(self.store, names):  # in the order asked (segment names sort)
            self.bytes += len(data)
            for line in data.splitlines():
                entry = _entry(line)
                if entry is not None:
                    self.recorded.setdefault(entry[0], deque()).append(entry[1])
        # sorts after every segment already there, so segments read back in order; the
        # random part keeps it clear of anything already there under that number
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
            _skipped(self._where, "written", exc)

    @property
    def _where(self) -> str:
        """This writer's segment (a bucket numbers its objects after it)."""
        return f"{self.store.uri}/{self._segment}{SUFFIX}"

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
        try:
            if self._file is not None:
                file, self._file = self._file, None
                file.close()
            await self.flush()
        except Exception as exc:  # as in `record`: never fail the tree
            _skipped(self._where, "written", exc)


def _entry(line: bytes) -> tuple[str, Any] | None:
    """One line's `[key, answer]`; None for anything else (the last line of a writer killed
    mid-write, or whatever else found its way into the file: it is only not replayed)."""
    try:
        key, value = json.loads(line)
    except (ValueError, TypeError, RecursionError):  # not JSON, not a pair, nested too deep
        return None
    return (key, value) if isinstance(key, str) else None


def _skipped(where: str, what: str, exc: BaseException) -> None:
    log.warning(
        "request log entry %s cannot be %s (%s: %s): skipped; the run goes on (the log "
        "only saves requests: what it would replay goes to the engines)",
        where,
        what,
        type(exc).__name__,
        redact_text(exc),
    )


def _names(store: Store) -> list[str]:
    """The entries of a log folder; none when it cannot be listed (with a warning)."""
    try:
        return store.names()
    except Exception as exc:  # a log never stops a run
        _skipped(store.uri, "listed", exc)
        return []


def _read(store: Store, names: list[str]) -> list[bytes]:
    """The segments `names` in order, each that cannot be read left out with a warning.

    All at once first (a bucket fetches them concurrently); when that fails, one by one,
    so one bad entry costs only itself."""
    try:
        return list(store.read_many([store.join(n) for n in names]).values())
    except Exception:  # found out entry by entry below
        pass
    found = []
    for name in names:
        try:
            found.append(store.read_bytes(name))
        except Exception as exc:
            _skipped(f"{store.uri}/{name}", "read", exc)
    return found


def _delete(store: Store, names: list[str]) -> None:
    """Delete `names`: all at once, else one by one, skipping (with a warning) each that
    cannot be deleted."""
    try:
        store.delete_many([store.join(n) for n in names])
        return
    except Exception:  # found out entry by entry below
        pass
    for name in names:
        try:
            store.delete(name)
        except Exception as exc:
            _skipped(f"{store.uri}/{name}", "deleted", exc)


def clean(store: Store, problem_ids: Iterable[str]) -> int:
    """Delete the logs of trees that are committed; returns how many were there."""
    removed = 0
    for problem_id in problem_ids:
        tree = store.child(FOLDER, tree_name(problem_id))
        names = _names(tree)
        if not names:
            continue
        _delete(tree, names)
        if not store.remote:
            # not empty: a writer still appending (its tree is committed anyway), or an
            # entry that could not be deleted
            with contextlib.suppress(OSError):
                tree.local_path.rmdir()
        removed += 1
    return removed


def logged_trees(store: Store) -> set[str]:
    """The tree names with a log in the run folder `store` (none when it cannot be listed)."""
    return set(_names(store.child(FOLDER)))


def clean_done(store: Store, done: Callable[[], Iterable[str]]) -> int:
    """At a run's start and end: delete logs of trees already committed (left by a kill
    between a commit and its clean, or written by a retried attempt of a committed tree);
    `done()` (the committed problem ids) is read only if any tree is still logged."""
    present = logged_trees(store)
    if not present:
        return 0
    return clean(store, [p for p in done() if tree_name(p) in present])


def remove_if_empty(store: Store) -> None:
    """At a run's end: the local `requests/` folder goes once no tree is logged (a bucket's
    prefix is gone with its last object)."""
    if not store.remote:
        with contextlib.suppress(OSError):
            store.child(FOLDER).local_path.rmdir()
