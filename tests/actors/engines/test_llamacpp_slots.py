"""llama.cpp's slots keep each tree's prefix: the settings the embedded engines rely on.

Several trees share one llama.cpp server with fewer slots than trees, and all their
prompts start with the same few-shot scaffold.  A child's prompt is its parent's prompt
plus the parent's step: what the engine should compute of it is the step, not the
parent's prompt again.  llama.cpp (xllamacpp 2026.10.11549) gives an idle slot to a
request when the slot's cached prompt covers more than `slot_prompt_similarity` of it;
otherwise it takes the least recently used slot and first loads the request's longest
cached prefix from its host-RAM prompt cache, where the states of slots taken by other
prompts are kept.  At llama.cpp's default of 0.1 the shared scaffold alone makes any slot
"similar", so a child lands on another tree's slot and recomputes its parent's prompt; at
the engine's default the parent's state is found.  Real SmolLM2 on llama.cpp, greedy.
"""

from __future__ import annotations

import pytest

from actors.engines.base import Sampling
from actors.engines.llamacpp import LlamaCppConfig, LlamaCppEngine

pytestmark = pytest.mark.integration

SCAFFOLD = (
    "Example problem:\nMia has 14 shells. Then Mia gets 5 more shells. How many shells does "
    "Mia have now?\nExample solution:\nStep 1: Mia has 14 + 5 = 19 shells. The answer is 19."
    "\n\nExample problem:\nLeo has 9 cards. Then Leo gives away 4 cards. How many cards does "
    "Leo have now?\nExample solution:\nStep 1: Leo has 9 - 4 = 5 cards. The answer is 5.\n\n"
)
NAMES = ("Ann", "Bob", "Cid", "Dee", "Eve", "Fay")
STEP = Sampling(max_tokens=24, stop=("\n",), temperature=0.0, seed=0)


def _root(name: str, n: int) -> str:
    return f"{SCAFFOLD}Problem:\n{name} has {n} apples and buys {n + 3} more. How many?\n"


async def _tree_walk(engine: LlamaCppEngine) -> tuple[int, int]:
    """Every tree's root step, then every tree's child step (each tree's parent long gone
    from the slots it used, with more trees than slots): the children's prompt tokens
    sent and those the engine served from its cache."""
    roots = [_root(name, 3 * i + 2) for i, name in enumerate(NAMES)]
    steps = [await engine.complete(prompt + "Step 1:", STEP) for prompt in roots]
    assert all(not s.error for s in steps), steps
    sent = cached = 0
    for prompt, step in zip(roots, steps, strict=True):
        child = await engine.complete(prompt + "Step 1:" + step.text + "\nStep 2:", STEP)
        assert not child.error, child
        sent += child.input_tokens
        cached += child.cached_tokens
    return sent, cached


async def test_a_child_finds_its_own_trees_prefix_among_more_trees_than_slots() -> None:
    default = LlamaCppConfig()
    engine = LlamaCppEngine(
        LlamaCppConfig(
            context_length=1024,
            parallel=2,
            threads=1,
            slot_prompt_similarity=default.slot_prompt_similarity,
            cache_ram_mib=default.cache_ram_mib,
        )
    )
    try:
        sent, cached = await _tree_walk(engine)
    finally:
        await engine.close()
    # each child recomputes at most its parent's step and its own "Step 2:" label
    assert cached / sent >= 0.85, (sent, cached)

    scaffold_only = LlamaCppEngine(
        LlamaCppConfig(context_length=1024, parallel=2, threads=1, slot_prompt_similarity=0.1)
    )
    try:
        sent_before, cached_before = await _tree_walk(scaffold_only)
    finally:
        await scaffold_only.close()
    # llama.cpp's own default: children land on other trees' slots and share only the
    # scaffold with them
    assert cached_before < cached, (cached_before, cached)
    assert sent_before == sent
