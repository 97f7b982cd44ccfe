"""The simulated grid under both PRM cost models, on a grid small enough for a test."""

from __future__ import annotations

import pytest

from benchmarks.scorer_value import grid

TINY = grid.GridSpec(budgets=(3000, 6000), seeds=(0,), problems=3, workers=1)


@pytest.fixture(scope="module")
def frame() -> object:
    return grid.run_grid(TINY)


def test_each_search_runs_once_per_cost_model_and_only_tokens_differ(frame: object) -> None:
    import pandas as pd

    assert isinstance(frame, pd.DataFrame)
    assert len(frame) == 2 * 2 * 2 * 3  # costs x methods x budgets x problems
    one_pass = frame[frame["cost"] == "one_pass"]
    genprm = frame[frame["cost"] == "genprm"]
    assert (one_pass["prm_output"] == 0).all() and (genprm["prm_output"] > 0).all()
    assert one_pass["prm_input"].sum() < genprm["prm_input"].sum()
    assert (frame["prm_cached"] <= frame["prm_input"]).all()
    assert (frame["prm_cached"] > 0).all()  # every score finds at least its prompt cached


def test_yield_and_ratios_follow_the_definitions(frame: object) -> None:
    import pandas as pd

    assert isinstance(frame, pd.DataFrame)
    table = grid.yield_table(frame)
    row = table[
        (table["cost"] == "one_pass") & (table["method"] == "bg_mcts") & (table["budget"] == 6000)
    ].iloc[0]
    mine = frame[
        (frame["cost"] == "one_pass") & (frame["method"] == "bg_mcts") & (frame["budget"] == 6000)
    ]
    total = mine["policy_output"].sum() + mine["prm_input"].sum() + mine["prm_output"].sum()
    assert row["total"] == total
    assert row["correct_trajectories_per_1k_total"] == pytest.approx(
        1000 * mine["correct_trajectories"].sum() / total
    )
    ratios = grid.yield_ratios(table)
    assert set(ratios["cost"]) == {"genprm", "one_pass"} and len(ratios) == 4
    head = grid.headline(table, ratios, "one_pass")
    assert head["budget"] == 6000
    assert "| one_pass | bg_mcts | 6K |" in grid.yield_markdown(table)
    assert "| genprm | 3K |" in grid.ratio_markdown(ratios)


def test_a_changed_search_fails_the_check(frame: object) -> None:
    import pandas as pd

    assert isinstance(frame, pd.DataFrame)
    broken = frame.copy()
    broken.loc[broken.index[0], "dpo_pairs"] += 1
    with pytest.raises(AssertionError, match="dpo_pairs differs"):
        grid._check_same_searches(broken)
