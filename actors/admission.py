"""How many trees to keep in flight per engine: from what the engines report.

A tree keeps `seqs_per_tree` sequences in an engine's batch on average (its in-flight
expansions times their choices, times the share of its time it spends at that engine:
a tree alternates policy and scorer) and keeps a working set of `context_tokens` of KV
hot (its prompt, the path it is extending and the outputs in flight).  Two limits:

* **full**: enough trees that the batch is full: max_seqs / seqs_per_tree;
* **warm**: no more trees than the KV cache can hold the working sets of (a `kv_share`
  of it: the rest is for the running sequences' outputs and for churn), so a tree's
  next step finds its prefix cached instead of prefilling it again.

When the two disagree (an H100 with 256 slots and a 400k-token KV cache at contexts of
thousands of tokens), warm wins: an evicted context costs its whole prefill again (a
3,000-token context: ~125 ms of engine time against ~20 ms for the 256 tokens it then
decodes), and the batch is filled by more expansions per tree
(`search.max_inflight_expansions`) instead of more trees.  The hand-set
`trees_per_actor` stays as a cap.  A measured prefix hit rate below `min_hit_rate`
shrinks the count in proportion (the working-set estimate was too small).

At run time `AdmissionController` moves that start by what the engines report per
interval (`LoadTracker` turns their `load()` counters into one reading) and
`AdmissionGate` lets a new tree start only below the current target.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actors.engines.base import EngineCapacity, EngineLoad
from search.config import SearchConfig


@dataclass(frozen=True, slots=True)
class TreeShape:
    """What one tree asks of an engine (estimates the caller derives from its config)."""

    seqs_per_tree: float
    context_tokens: float


def trees_in_flight(
    engines: list[tuple[EngineCapacity, TreeShape]],
    *,
    cap: int,
    kv_share: float = 0.9,
    min_hit_rate: float = 0.8,
) -> int:
    """Trees to keep in flight: the smallest over the engines of min(full, warm), at
    least 1 and at most `cap`."""
    if not engines:
        return max(1, cap)
    counts: list[int] = []
    for capacity, shape in engines:
        full = math.ceil(capacity.max_seqs / max(shape.seqs_per_tree, 1e-9))
        warm = math.floor(kv_share * capacity.kv_tokens / max(shape.context_tokens, 1.0))
        count = min(full, warm)
        hit = capacity.prefix_hit_rate
        if hit is not None and hit < min_hit_rate:
            count = math.floor(count * hit / min_hit_rate)
        counts.append(count)
    return max(1, min(cap, *counts))


def search_tree_shape(
    *,
    prompt_tokens: float,
    path_tokens: float,
    step_tokens: float,
    choices: int,
    inflight: int,
    engine_share: float = 0.5,
) -> TreeShape:
    """One tree's load on one engine: `inflight` expansions of `choices` sequences,
    `engine_share` of the time at this engine; its working set is the prompt, the path
    being extended and the outputs in flight (siblings share the path's blocks)."""
    return TreeShape(
        seqs_per_tree=inflight * choices * engine_share,
        context_tokens=prompt_tokens + path_tokens + inflight * choices * step_tokens,
    )


class AdmissionController:
    """Trees in flight, steered by what the engine reports at every interval.

    The static rule (`trees_in_flight`) is the start: it only has estimates of a tree's
    working set.  Then, per interval: a prefix hit rate below `min_hit_rate` (contexts
    being evicted) takes `step` of the trees away; otherwise a batch that is not full
    (running + waiting below `max_seqs`) adds `step` more, up to `cap`.  Fewer trees
    take effect as trees end: running trees are never stopped, and new ones are
    admitted only below the target, so continuing (hot) trees always go first.
    """

    def __init__(self, start: int, cap: int, *, min_hit_rate: float = 0.85, step: float = 0.125):
        self.cap = max(1, cap)
        self.target = max(1, min(start, self.cap))
        self.min_hit_rate = min_hit_rate
        self.step = step

    def update(
        self,
        *,
        running: int | None,
        waiting: int | None,
        max_seqs: int,
        hit_rate: float | None,
    ) -> int:
        """The new target; an unknown batch (None) or hit rate never moves it that way."""
        if hit_rate is not None and hit_rate < self.min_hit_rate:
            self.target = max(1, math.floor(self.target * (1 - self.step)))
        elif running is not None and waiting is not None and running + waiting < max_seqs:
            self.target = min(self.cap, self.target + max(1, math.ceil(self.target * self.step)))
        return self.target

    def observe(self, reading: LoadReading) -> int:
        return self.update(
            running=reading.running,
            waiting=reading.waiting,
            max_seqs=reading.max_seqs,
            hit_rate=reading.hit_rate,
        )


@dataclass(frozen=True, slots=True)
class LoadReading:
    """The engines over one interval, summed over roles and replicas (None: unknown)."""

    running: int | None
    waiting: int | None
    max_seqs: int
    hit_rate: float | None


class LoadTracker:
    """Turns the deployments' `load()` answers into one `LoadReading` per interval.

    A deployment call reaches one replica, so its batch stands for each of the role's
    `replicas` (the router spreads trees evenly).  The hit rate is over the interval:
    the prompt-token counters' growth since the same replica last answered (the
    cumulative rate would hide a cache that has just started to evict); a replica seen
    for the first time only sets its baseline.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[int, int]] = {}

    def reading(
        self, loads: Mapping[str, Mapping[str, Any]], replicas: Mapping[str, int]
    ) -> LoadReading:
        running: int | None = 0
        waiting: int | None = 0
        max_seqs = 0
        prompt = cached = 0
        for role, answer in loads.items():
            count = max(1, int(replicas.get(role, 1)))
            fields = {k: v for k, v in answer.items() if k in EngineLoad.__dataclass_fields__}
            load = EngineLoad(**fields)
            max_seqs += load.max_seqs * count
            running = (
                None if running is None or load.running is None else running + load.running * count
            )
            waiting = (
                None if waiting is None or load.waiting is None else waiting + load.waiting * count
            )
            if load.prompt_tokens is None or load.cached_prompt_tokens is None:
                continue
            key = (role, str(answer.get("replica", "")))
            now = (load.prompt_tokens, load.cached_prompt_tokens)
            before = self._last.get(key)
            self._last[key] = now
            if before is not None and now[0] >= before[0]:
                prompt += now[0] - before[0]
                cached += now[1] - before[1]
        return LoadReading(
            running=running,
            waiting=waiting,
            max_seqs=max_seqs,
            hit_rate=cached / prompt if prompt else None,
        )


class AdmissionGate:
    """At most `target` trees in flight; the target may move while trees run.

    A smaller target stops no running tree: it takes effect as trees end.  Waiters are
    woken in arrival order.
    """

    def __init__(self, target: int) -> None:
        self.target = max(1, target)
        self.in_flight = 0
        self.peak = 0
        self._changed = asyncio.Condition()

    async def enter(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < self.target)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    async def leave(self) -> None:
        async with self._changed:
            self.in_flight -= 1
            self._changed.notify_all()

    async def set_target(self, target: int) -> None:
        async with self._changed:
            self.target = max(1, target)
            self._changed.notify_all()


def admitted_per_actor(
    *,
    capacities: Mapping[str, Mapping[str, Any]],
    replicas: Mapping[str, int],
    search: SearchConfig,
    budget: float,
    analysis_tokens: int,
    prompt_tokens: int,
    actors: int,
    cap: int,
) -> int:
    """Trees in flight per search actor for a run: the policy and scorer deployments'
    capacity (`capacity()` of one replica, times their replicas) shared by the actors."""
    choices = int(getattr(search, "k", 2))
    inflight = int(getattr(search, "max_inflight_expansions", 1))
    step = search.step_max_tokens / 2
    path = min(budget / max(choices, 1) / 2, float(capacities["policy"]["context_length"]))
    shapes = {
        "policy": search_tree_shape(
            prompt_tokens=prompt_tokens,
            path_tokens=path,
            step_tokens=step,
            choices=choices,
            inflight=inflight,
        ),
        # GenPRM's conversation holds the path and one analysis per step; a one-pass PRM
        # (analysis_tokens 0) reads the path and each child's own new step
        "scorer": search_tree_shape(
            prompt_tokens=prompt_tokens,
            path_tokens=path * (1 + analysis_tokens / max(search.step_max_tokens, 1)),
            step_tokens=analysis_tokens / 2 if analysis_tokens else step,
            choices=choices,
            inflight=inflight,
        ),
    }
    engines = []
    for role, shape in shapes.items():
        one = capacities[role]
        count = max(1, int(replicas.get(role, 1)))
        engines.append(
            (
                EngineCapacity(
                    max_seqs=int(one["max_seqs"]) * count,
                    kv_tokens=int(one["kv_tokens"]) * count,
                    context_length=int(one["context_length"]),
                    prefix_hit_rate=one.get("prefix_hit_rate"),
                ),
                shape,
            )
        )
    total = trees_in_flight(engines, cap=cap * max(actors, 1))
    return max(1, min(cap, math.ceil(total / max(actors, 1))))


__all__ = [
    "AdmissionController",
    "AdmissionGate",
    "LoadReading",
    "LoadTracker",
    "TreeShape",
    "admitted_per_actor",
    "search_tree_shape",
    "trees_in_flight",
]
