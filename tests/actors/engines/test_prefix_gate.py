"""PrefixGate: which requests wait for which (plain asyncio, no engine)."""

from __future__ import annotations

import asyncio
import random

import pytest

from actors.engines.prefix_gate import PrefixGate, common_prefix

SCAFFOLD = "Example problem: Mia has 14 shells and gets 5 more. Answer: 19.\n" * 4
PARENT = SCAFFOLD + "Problem: Leo has 9 cards and gives away 4 of them.\nStep 1:"


def test_common_prefix_matches_a_character_walk() -> None:
    rng = random.Random(0)
    for _ in range(500):
        a = "".join(rng.choice("ab") for _ in range(rng.randrange(0, 30)))
        b = "".join(rng.choice("ab") for _ in range(rng.randrange(0, 30)))
        walk = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        assert common_prefix(a, b) == (min(len(a), len(b)) if walk is None else walk)


async def _request(gate: PrefixGate, prompt: str, log: list[str], name: str) -> None:
    async with gate.turn(prompt):
        log.append(f"{name} start")
        await asyncio.sleep(0.01)
        log.append(f"{name} end")
        gate.completed(prompt + " answer")


async def test_the_same_prompt_in_flight_is_waited_for() -> None:
    gate, log = PrefixGate(), []
    await asyncio.gather(
        _request(gate, PARENT, log, "first"), _request(gate, PARENT, log, "sibling")
    )
    assert log == ["first start", "first end", "sibling start", "sibling end"]
    assert gate.waits == 1


async def test_siblings_sharing_an_uncached_parent_go_one_after_another() -> None:
    gate, log = PrefixGate(margin=16), []
    gate.completed(SCAFFOLD)  # what every request shares is cached already
    await asyncio.gather(
        _request(gate, PARENT + " 9 - 4 = 5 cards.", log, "a"),
        _request(gate, PARENT + " Leo has 5 cards left.", log, "b"),
    )
    assert log.index("a end") < log.index("b start")


async def test_requests_sharing_only_what_is_cached_run_together() -> None:
    gate, log = PrefixGate(margin=16), []
    gate.completed(SCAFFOLD + "Problem: an earlier tree's problem")
    await asyncio.gather(
        _request(gate, SCAFFOLD + "Problem: Ann has 3 apples and buys 4 more.", log, "ann"),
        _request(gate, SCAFFOLD + "Problem: Bob has 7 pears and eats 2 of them.", log, "bob"),
    )
    assert log[:2] == ["ann start", "bob start"]
    assert gate.waits == 0


async def test_a_failed_request_still_lets_the_waiting_ones_go() -> None:
    gate = PrefixGate()

    async def failing() -> None:
        async with gate.turn(PARENT):
            await asyncio.sleep(0.01)
            raise RuntimeError("engine down")

    log: list[str] = []
    results = await asyncio.wait_for(
        asyncio.gather(failing(), _request(gate, PARENT, log, "next"), return_exceptions=True),
        timeout=5,
    )
    assert isinstance(results[0], RuntimeError)
    assert log == ["next start", "next end"]


@pytest.mark.parametrize("remembered", [1, 4])
async def test_only_recent_completions_count_as_cached(remembered: int) -> None:
    gate = PrefixGate(margin=8, remembered=remembered)
    gate.completed(PARENT + " 9 - 4 = 5")
    for i in range(3):
        gate.completed(f"another tree {i}")
    log: list[str] = []
    # with the parent's text forgotten, a sibling in flight sharing it is worth a wait
    await asyncio.gather(
        _request(gate, PARENT + " 9 - 4 = 5 cards. The answer is 5.", log, "a"),
        _request(gate, PARENT + " 9 - 4 = 5 cards, so 5.", log, "b"),
    )
    assert gate.waits == (1 if remembered == 1 else 0)
