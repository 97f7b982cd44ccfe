"""Shared by the vLLM contract tests: find a seed whose completion ends a given way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from actors.engines.base import Completion
from search.protocols import FinishReason


async def first_with_finish(
    make: Callable[[int], Awaitable[Completion]], finish: FinishReason, seeds: int = 40
) -> Completion:
    """The first completion over seeds 0, 1, ... that ends with `finish`."""
    seen = []
    for seed in range(seeds):
        completion = await make(seed)
        if completion.finish is finish:
            return completion
        seen.append((completion.finish.value, completion.error))
    raise AssertionError(f"no {finish} in {seeds} seeds: {seen}")
