"""Live counters of a run, pushed by the search actors while their trees advance.

A search actor returns a whole batch when its last tree ends, so the driver alone would
see nothing for minutes.  Instead each actor wraps its policy and scorer in
`CountingPolicy` / `CountingScorer` (which count nodes, answered nodes and tokens as the
requests come back) and a `Reporter` pushes the deltas to one small `ProgressBoard`
actor every `every_s` seconds (fire-and-forget: a slow board never slows a search).  The
driver polls `ProgressBoard.snapshot` for the display, and reads it once more at the end
for the run summary: among its counters, the engine answers whose token counts had to be
clamped (`search.protocols.ClampedCounts`), which the engine replicas' logs alone would
say only until the cluster is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from actors.wrappers import PolicyWrapper, ScorerWrapper
from search.answers import AnswerExtraction, is_answered
from search.budget import TokenWeights
from search.config import CostWeights
from search.protocols import (
    COUNT_FAULTS,
    TOKEN_KINDS,
    ClampedCounts,
    Generation,
    Policy,
    Score,
    Scorer,
    TokenCounts,
)

BOARD_NAME = "bgmcts-progress"
# The engines whose clamped answers are counted, by their counters' prefix (as the token
# kinds: `prm_` is the scorer's).
CLAMPED_ENGINES = ("policy", "prm")
_CLAMPED_PARTS = ("answers", *COUNT_FAULTS)


@dataclass
class Counters:
    trees_started: int = 0
    trees_done: int = 0  # searched, graded and returned (errors included)
    # of those, the night allocator's second trees (the display counts problems' first
    # trees against the selection, and second trees apart)
    second_started: int = 0
    second_done: int = 0
    tree_errors: int = 0
    nodes: int = 0  # children generated (every expanded node)
    answered: int = 0
    correct: int = 0  # answered nodes labelled correct: known when a tree is graded
    # The search's token counts by kind (`search.protocols.TOKEN_KINDS`), as the engines
    # answer: the policy's prompt is the engine's count (the budget may have charged the
    # count it sized the request by), inserted text is known when a tree ends.
    policy_output_tokens: int = 0
    policy_input_tokens: int = 0
    inserted_prompt_tokens: int = 0
    prm_input_tokens: int = 0
    prm_output_tokens: int = 0
    # what the engines read (pipeline/report/engine_reads.py): every call's prompt, and
    # of those tokens the ones served from the engine's prefix cache
    policy_prompt_sent_tokens: int = 0
    policy_prompt_cached_tokens: int = 0
    prm_prompt_cached_tokens: int = 0
    spent: float = 0.0  # cost units, with the search's cost weights
    # answered from the request log instead of the engines (actors.replay)
    replayed_requests: int = 0
    replayed_policy_output_tokens: int = 0
    replayed_prm_output_tokens: int = 0
    # engine requests sent again after a failure or a time-out (`actors.serve`), per engine
    policy_retried_requests: int = 0
    prm_retried_requests: int = 0
    # engine answers whose token counts could not be and were clamped where they entered
    # (`ClampedCounts`): per engine, the answers, and those with each fault
    policy_clamped_answers: int = 0
    policy_clamped_cached_above_sent: int = 0
    policy_clamped_negative: int = 0
    policy_clamped_not_a_number: int = 0
    prm_clamped_answers: int = 0
    prm_clamped_cached_above_sent: int = 0
    prm_clamped_negative: int = 0
    prm_clamped_not_a_number: int = 0

    def count_clamped(self, engine: str, clamped: ClampedCounts) -> None:
        """Add answers of `engine` (one of `CLAMPED_ENGINES`) whose counts were clamped."""
        if not clamped:
            return
        for part in _CLAMPED_PARTS:
            name = f"{engine}_clamped_{part}"
            setattr(self, name, getattr(self, name) + getattr(clamped, part))

    def count(self, counts: TokenCounts, cost: TokenWeights) -> None:
        """Add one request's or one score's token counts and what they cost."""
        for kind in TOKEN_KINDS:
            setattr(self, kind, getattr(self, kind) + getattr(counts, kind))
        self.spent += cost.cost_of(counts)

    def add(self, other: dict[str, Any]) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + other.get(f.name, 0))

    def take(self) -> dict[str, Any]:
        """The counts so far as a dict, then zero (the deltas a reporter pushes)."""
        out = {k: v for k, v in asdict(self).items() if v}
        for f in fields(self):
            setattr(self, f.name, type(getattr(self, f.name))())
        return out


@dataclass
class Gauges:
    """One search actor's levels (not deltas: the latest value wins).

    `admitted`: the trees it lets run at once (`trees_per_actor`, or with `admission`
    the highest target it set from the engines' capacity and load); `peak_in_flight`:
    the most it ran at once.
    """

    admitted: int = 0
    peak_in_flight: int = 0


class ProgressBoard:
    """The Ray actor the search actors push to and the driver reads (one per run)."""

    def __init__(self) -> None:
        self.totals = Counters()
        self.gauges: dict[str, Gauges] = {}  # by search actor

    def add(self, delta: dict[str, Any], actor: str = "", gauges: Gauges | None = None) -> None:
        self.totals.add(delta)
        if gauges is not None:
            self.gauges[actor] = gauges

    def snapshot(self) -> dict[str, Any]:
        """The counters summed over the actors; `admitted` and `peak_in_flight` per actor
        (the largest over the actors; 0 before any actor reported)."""
        levels = self.gauges.values()
        return asdict(self.totals) | {
            "admitted": max((g.admitted for g in levels), default=0),
            "peak_in_flight": max((g.peak_in_flight for g in levels), default=0),
        }


def clamped_counts(snapshot: Mapping[str, Any], engine: str) -> ClampedCounts:
    """`engine`'s clamped answers in a board snapshot (`ProgressBoard.snapshot`)."""
    return ClampedCounts(
        **{part: int(snapshot.get(f"{engine}_clamped_{part}") or 0) for part in _CLAMPED_PARTS}
    )


class CountingPolicy(PolicyWrapper):
    """Counts what comes back from `policy`; everything else is `policy`'s."""

    def __init__(
        self,
        policy: Policy,
        counters: Counters,
        cost: CostWeights,
        extraction: AnswerExtraction = AnswerExtraction.BOXED,
    ) -> None:
        super().__init__(policy)
        self._counters = counters
        self._cost = cost
        self._extraction = extraction

    def returned(self, generations: Sequence[Generation]) -> None:
        c = self._counters
        c.nodes += len(generations)
        c.answered += sum(is_answered(g.text, g.finish, self._extraction) for g in generations)
        c.count(TokenCounts.of_request(generations), self._cost)
        for g in generations:
            c.count_clamped("policy", g.clamped)


class CountingScorer(ScorerWrapper):
    """Counts what comes back from `scorer`; everything else is `scorer`'s."""

    def __init__(self, scorer: Scorer, counters: Counters, cost: CostWeights) -> None:
        super().__init__(scorer)
        self._counters = counters
        self._cost = cost

    def returned(self, score: Score) -> None:
        self._counters.count(TokenCounts.of_score(score), self._cost)
        self._counters.count_clamped("prm", score.clamped)


class Reporter:
    """Pushes a search actor's counters (and its gauges, when they changed) to the board
    every `every_s` seconds."""

    def __init__(
        self,
        board: Any,
        counters: Counters,
        every_s: float = 0.5,
        *,
        actor: str = "",
        gauges: Gauges | None = None,
    ) -> None:
        self.board = board
        self.counters = counters
        self.every_s = every_s
        self.actor = actor
        self.gauges = gauges
        self._pushed: Gauges | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            self.flush()

    def flush(self) -> None:
        delta = self.counters.take()
        gauges = None if self.gauges is None or self.gauges == self._pushed else self.gauges
        if delta or gauges is not None:
            gauges = None if gauges is None else Gauges(**asdict(gauges))  # a copy: it changes
            self.board.add.remote(delta, self.actor, gauges)  # fire and forget
            self._pushed = gauges or self._pushed
