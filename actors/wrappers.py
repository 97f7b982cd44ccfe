"""A policy or scorer in front of another, as a search actor stacks them.

A search actor puts its Serve clients behind the request-log replay (`actors.replay`), the
run's counters (`actors.progress`) and, for the policy, the engine breaker
(`actors.search_outcome`).  Each is a `PolicyWrapper` or `ScorerWrapper`: it changes what
it overrides, and the rest is the wrapped one's (`count_tokens`, and through
`__getattr__` whatever else it has: `prompt_tokens`, `stats`, ...).  Most only look at
the answers as they come back, in `returned`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from search.protocols import Generation, GenerationRequest, Policy, Score, Scorer, ScoreRequest


class PolicyWrapper:
    """`policy`, with `returned` shown every request's generations."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name

    async def generate(self, request: GenerationRequest) -> Sequence[Generation]:
        generations = await self.policy.generate(request)
        self.returned(generations)
        return generations

    def returned(self, generations: Sequence[Generation]) -> None:
        """What this wrapper does with one request's generations (here: nothing)."""

    async def count_tokens(self, text: str) -> int:
        return await self.policy.count_tokens(text)

    def __getattr__(self, name: str) -> Any:  # prompt_tokens, stats, ...: the policy's
        return getattr(self.policy, name)


class ScorerWrapper:
    """`scorer`, with `returned` shown every score."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self.name = scorer.name

    async def score(self, request: ScoreRequest) -> Score:
        score = await self.scorer.score(request)
        self.returned(score)
        return score

    def returned(self, score: Score) -> None:
        """What this wrapper does with one score (here: nothing)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.scorer, name)


__all__ = ["PolicyWrapper", "ScorerWrapper"]
