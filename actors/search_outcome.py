"""Whether a finished search produced anything, and a circuit breaker for a dead engine.

A search whose every request failed (endpoint down), whose problem cannot fit the
model's context, whose every step is empty (an engine that answers with nothing) or
which spent nothing, still returns a tree (`stop_reason: stalled`, or
`budget_exhausted` when continuation prompts spent the budget around empty steps).
Recording it as a searched problem would make every rerun skip it, so the search
actor turns it into an `errors` row instead (`failure_reason`), which a rerun retries.

`EngineBreaker` counts policy requests that failed after their retries, in a row
across every tree of the actor; at `limit` it opens, and the actor stops starting
new problems (they become retryable error rows without spending anything) so that
an engine outage does not use up a night's slice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from actors.wrappers import PolicyWrapper
from search.driver import SearchResult
from search.protocols import FinishReason, Generation, Policy

BREAKER_STAGE = "engine"  # the `stage` of the error rows of problems never started
SEARCH_STAGE = "search"


def failure_reason(
    result: SearchResult, *, context_length: int | None, problem_tokens: int | None = None
) -> str | None:
    """Why `result` is not a usable search, or None when at least one node succeeded.

    A node succeeded when it has no error, did not overflow the context and holds text
    (`Node.empty`: white space only is no step).  `problem_tokens` (the problem's prompt
    size, when known) makes the context-overflow message name both sizes.
    """
    nodes = [n for n in result.tree if n.id != result.tree.root.id]
    ok = [n for n in nodes if n.error is None and n.finish not in _FAILED and not n.empty]
    if ok and result.c_used > 0:
        return None
    if nodes and all(n.finish is FinishReason.CONTEXT_OVERFLOW for n in nodes):
        size = "does not fit" if problem_tokens is None else f"is {problem_tokens:,} tokens"
        context = "" if context_length is None else f"; the policy's context is {context_length:,}"
        return f"problem {size}{context}"
    errors = [n.error for n in nodes if n.error]
    if nodes and len(errors) == len(nodes):
        return f"every request failed ({len(nodes)} nodes): {errors[0]}"
    empty = [n for n in nodes if n.error is None and n.finish not in _FAILED and n.empty]
    if empty and not ok:
        return (
            f"every step the policy returned was empty ({len(empty)} of {len(nodes)} nodes "
            f"had no text, {len(errors)} failed): the engine answered with nothing"
        )
    if not nodes:
        return f"the search spent nothing (stop_reason {result.stop_reason}, no node created)"
    return f"the search spent nothing usable (stop_reason {result.stop_reason}, c_used 0)"


_FAILED = (FinishReason.ERROR, FinishReason.CONTEXT_OVERFLOW)


class EngineBreaker:
    """Opens after `limit` policy requests in a row failed (0: never opens)."""

    def __init__(self, limit: int, on_open: Callable[[int], None] | None = None) -> None:
        self.limit = limit
        self.failures_in_a_row = 0
        self.open = False
        self._on_open = on_open

    def record(self, generations: Sequence[Generation]) -> None:
        failed = bool(generations) and all(g.finish is FinishReason.ERROR for g in generations)
        if not failed:
            self.failures_in_a_row = 0
            return
        self.failures_in_a_row += 1
        if self.limit and not self.open and self.failures_in_a_row >= self.limit:
            self.open = True
            if self._on_open is not None:
                self._on_open(self.failures_in_a_row)

    @property
    def message(self) -> str:
        return (
            f"engine circuit breaker open: {self.failures_in_a_row} policy requests failed in "
            "a row; problem not started (retried on the next run)"
        )


class BreakerPolicy(PolicyWrapper):
    """A `Policy` that reports every request's outcome to an `EngineBreaker`."""

    def __init__(self, policy: Policy, breaker: EngineBreaker) -> None:
        super().__init__(policy)
        self.breaker = breaker

    def returned(self, generations: Sequence[Generation]) -> None:
        self.breaker.record(generations)


__all__ = ["BREAKER_STAGE", "SEARCH_STAGE", "BreakerPolicy", "EngineBreaker", "failure_reason"]
