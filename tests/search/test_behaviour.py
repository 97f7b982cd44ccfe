"""BG-MCTS's wide-to-deep schedule (Sec. 3), averaged over many seeded searches.

Scores are random but drawn from one distribution at every depth: GenPRM-like
near-binary values (App. K), near 1 or near 0 with equal probability.  The
scripted policy and scorer are fakes: no model runs in unit tests.

With i.i.d. *uniform* scores the equations almost never widen (E_gen = mu + lambda
rho sigma^2 rarely beats a child's exploration bonus), so the near-binary case is
where widening is visible; `benchmarks/wide_to_deep.py` prints both.
"""

from __future__ import annotations

import asyncio

from search import parse_search_config, run_search
from search.analysis import PhaseStats, budget_phases
from search.scripted import ScriptedPolicy, ScriptedScorer

SEEDS = range(40)
BUDGET = 4000


def phases(algorithm: str) -> list[PhaseStats]:
    async def run_all() -> list[PhaseStats]:
        config = parse_search_config({"algorithm": algorithm})
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
        return budget_phases(results)

    return asyncio.run(run_all())


def test_bg_mcts_goes_deeper_and_widens_less_as_the_budget_runs_out() -> None:
    first, _, last = phases("bg_mcts")
    assert last.mean_depth > first.mean_depth, (first, last)
    assert first.generative > 0, "the generative child never fired: widening is broken"
    assert last.generative_share < first.generative_share, (first, last)


def test_mcts_never_widens_and_deepens_less_than_bg_mcts() -> None:
    """Contrast: budget-agnostic MCTS has no generative child and stays shallower late."""
    mcts = phases("mcts")
    bg = phases("bg_mcts")
    assert all(p.generative == 0 for p in mcts)
    assert bg[2].mean_depth > mcts[2].mean_depth
