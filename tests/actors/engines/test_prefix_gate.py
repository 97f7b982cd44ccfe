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
    async with gate.turn(prompt) as turn:
        log.append(f"{name} start")
        await asyncio.sleep(0.01)
        log.append(f"{name} end")
        turn.completed(" answer")


async def test_the_same_prompt_in_flight_is_waited_for() -> None:
    gate, log = PrefixGate(), []
    await asyncio.gather(
        _request(gate, PARENT, log, "first"), _request(gate, PARENT, log, "sibling")
    )
    assert log == ["first start", "first end", "sibling start", "sibling end"]
    assert gate.waits == 1


async def test_siblings_sharing_an_uncached_parent_go_one_after_another() -> None:
    gate, log = PrefixGate(margin=16), []
    gate.remember(SCAFFOLD)  # what every request shares is cached already
    await asyncio.gather(
        _request(gate, PARENT + " 9 - 4 = 5 cards.", log, "a"),
        _request(gate, PARENT + " Leo has 5 cards left.", log, "b"),
    )
    assert log.index("a end") < log.index("b start")


async def test_requests_sharing_only_what_is_cached_run_together() -> None:
    gate, log = PrefixGate(margin=16), []
    gate.remember(SCAFFOLD + "Problem: an earlier tree's problem")
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
    gate.remember(PARENT + " 9 - 4 = 5")
    for i in range(3):
        gate.remember(f"another tree {i}")
    log: list[str] = []
    # with the parent's text forgotten, a sibling in flight sharing it is worth a wait
    await asyncio.gather(
        _request(gate, PARENT + " 9 - 4 = 5 cards. The answer is 5.", log, "a"),
        _request(gate, PARENT + " 9 - 4 = 5 cards, so 5.", log, "b"),
    )
    assert gate.waits == (1 if remembered == 1 else 0)


async def test_a_continuation_goes_before_the_siblings_that_waited() -> None:
    """GenPRM's judgement (the analysis's prompt and answer, then more) takes the engine's
    state of its analysis before a sibling that waited for that analysis."""
    gate, log = PrefixGate(margin=16, grace_s=1.0), []
    gate.remember(SCAFFOLD)
    analysis = PARENT + " 9 - 4 = 5 cards. <analyze>"

    async def analysis_then_judgement() -> None:
        await _request(gate, analysis, log, "analysis")
        await asyncio.sleep(0.02)  # the scorer renders the judgement's prompt meanwhile
        await _request(gate, analysis + " answer</analyze> Judgement:", log, "judgement")

    async def sibling() -> None:
        await asyncio.sleep(0.001)
        await _request(gate, PARENT + " 4 cards are gone. <analyze>", log, "sibling")

    await asyncio.gather(analysis_then_judgement(), sibling())
    assert log.index("judgement start") < log.index("sibling start")


async def test_without_a_continuation_the_waiting_sibling_goes_after_the_grace() -> None:
    gate, log = PrefixGate(grace_s=0.05), []
    started = asyncio.get_running_loop().time()
    await asyncio.gather(
        _request(gate, PARENT, log, "first"), _request(gate, PARENT, log, "sibling")
    )
    assert log == ["first start", "first end", "sibling start", "sibling end"]
    assert asyncio.get_running_loop().time() - started >= 0.05 + 0.02
