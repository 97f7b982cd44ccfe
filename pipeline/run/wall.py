"""The wall-time cap of a run (`max_wall_s`): a stop at a tree boundary, on a timer.

A run that hangs (an engine that never answers, a cluster that stalls) would hold its GPUs
until someone noticed.  With `max_wall_s` set, the job's start fixes one moment, `stop_at`,
that every search actor knows (`WallCap`, handed to the actors with the run config):

* from `stop_at` on no new tree starts: a problem that reaches an actor later (or waits at
  its admission gate) comes back unsearched, at once;
* a tree in flight at `stop_at` may still finish within `wall_grace_s`; one still running
  then is cancelled and comes back unsearched too.

An unsearched problem has no row of any kind (no tree, no error), so the driver commits
nothing for it and the resume rule (`pipeline.store.resume`) searches it again on the next
run; only whole trees are ever committed.  The stream then ends by itself (the queued
problems drain through the actors in milliseconds), and the run commits, reports and
publishes what it has as usual: the same end as an interrupted run's, with a report.

The moment is a wall-clock time (`time.time()`), not a monotonic one: the actors run in
other processes, on other nodes, which share the wall clock (NTP), not a monotonic origin.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from pipeline.config import RunConfig

T = TypeVar("T")


@dataclass(frozen=True)
class WallCap:
    """When a run stops starting trees (`stop_at`, epoch seconds) and how long the trees
    in flight then have (`grace_s`)."""

    stop_at: float
    grace_s: float

    @classmethod
    def start(cls, config: RunConfig, started: float | None = None) -> WallCap | None:
        """The cap of a job started at `started` (epoch seconds; default now) under
        `config`; None without `max_wall_s`."""
        if config.max_wall_s is None:
            return None
        begun = time.time() if started is None else started
        return cls(begun + config.max_wall_s, config.wall_grace_s)

    @property
    def abandon_at(self) -> float:
        """When a tree still in flight is given up."""
        return self.stop_at + self.grace_s

    def up(self) -> bool:
        """Has the cap been reached (no new tree may start)?"""
        return time.time() >= self.stop_at

    async def finish(self, tree: Coroutine[Any, Any, T]) -> T | None:
        """Await `tree`, one that started before `stop_at`; None (the tree cancelled) when
        it is still running at `abandon_at`."""
        try:
            async with asyncio.timeout_at(self._loop_time(self.abandon_at)) as scope:
                return await tree
        except TimeoutError:
            if scope.expired():
                return None
            raise  # the tree's own timeout, not the cap's

    @staticmethod
    def _loop_time(at: float) -> float:
        """The event loop's clock reading at wall-clock time `at`."""
        return asyncio.get_running_loop().time() + (at - time.time())


__all__ = ["WallCap"]
