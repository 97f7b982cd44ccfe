"""BG-MCTS's wide-to-deep schedule (Sec. 3), averaged over many seeded searches.

Scores are random but drawn from one distribution at every depth: GenPRM-like
near-binary values (App. K), near 1 or near 0 with equal probability.  The
scripted policy and scorer are fakes: no model runs in unit tests.

With i.i.d. *uniform* scores the equations almost never widen (E_gen = mu + lambda
rho sigma^2 rarely beats a child's exploration bonus), so the near-binary case is
where widening is visible; that observation is recorded in the README.
"""

from __future__ import annotations

import asyncio
from statistics import mean

from search import parse_search_config, run_search
from search.scripted import ScriptedPolicy, ScriptedScorer

SEEDS = range(40)
BUDGET = 4000


def _by_third(algorithm: str) -> tuple[list[list[int]], list[list[bool]]]:
    async def run_all() -> tuple[list[list[int]], list[list[bool]]]:
        config = parse_search_config({"algorithm": algorithm})
        depths: list[list[int]] = [[], [], []]
        generative: list[list[bool]] = [[], [], []]
        results = await asyncio.gather(
            *(
                run_search(
                    "p",
                    config,
                    ScriptedPolicy(seed=s, p_answer=0.15, step_tokens=(20, 60)),
                    ScriptedScorer(seed=s, distribution="near_binary", p_high=0.5),
                    BUDGET,
                    seed=s,
                )
                for s in SEEDS
            )
        )
        for result in results:
            for node in result.tree.nodes[1:]:
                third = min(2, int(3 * node.c_used / BUDGET))
                depths[third].append(node.depth)
                generative[third].append(node.from_generative)
        return depths, generative

    return asyncio.run(run_all())


def test_bg_mcts_goes_deeper_and_widens_less_as_the_budget_runs_out() -> None:
    depths, generative = _by_third("bg_mcts")
    first, last = mean(depths[0]), mean(depths[2])
    assert last > first, f"mean depth first third {first:.2f}, last third {last:.2f}"
    share = [mean(map(float, g)) for g in generative]
    assert share[0] > 0, "the generative child never fired: widening is broken"
    assert share[2] < share[0], f"generative share by third: {share}"


def test_mcts_never_widens_and_deepens_less_than_bg_mcts() -> None:
    """Contrast: budget-agnostic MCTS has no generative child and stays shallower late."""
    mcts_depths, mcts_generative = _by_third("mcts")
    bg_depths, _ = _by_third("bg_mcts")
    assert not any(any(g) for g in mcts_generative)
    assert mean(bg_depths[2]) > mean(mcts_depths[2])
