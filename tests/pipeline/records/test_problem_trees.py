"""A problem searched twice (`pipeline.records.problem_trees`): one forest, the per-problem
caps across both trees, no row twice.  Real BG-MCTS trees of the simulated world, graded by
its ground truth (exact match, as `jobs.evaluate` grades it)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from common.grading import Verdict
from pipeline.records import BuildContext, RecordsConfig, Row, grade_result, rows_for
from pipeline.records.problem_trees import forest, further_rows, row_texts, uncapped
from search import SearchResult, parse_search_config, run_search
from search.simulated import SimParams, SimPolicy, SimProblem, SimScorer, simulated_problems

TABLES = ("sft", "dpo", "step_dpo", "prm", "kto")
RECORDS = RecordsConfig()


async def _exact(pairs: Sequence[tuple[str | None, str]], timeout_s: float) -> list[Verdict]:
    return [Verdict.MATCH if a == b else Verdict.NO_MATCH for a, b in pairs]


def _search(problem: SimProblem, budget: int, seed: int) -> SearchResult:
    params = SimParams()
    config = parse_search_config({"algorithm": "bg_mcts"})
    return asyncio.run(
        run_search(
            problem.problem,
            config,
            SimPolicy(params, seed=seed),
            SimScorer(params, seed=seed),
            budget,
            seed,
        )
    )


def _rows(
    problem: SimProblem, result: SearchResult, records: RecordsConfig
) -> dict[str, list[Row]]:
    graded = asyncio.run(
        grade_result(result, problem.reference, problem_id=problem.problem_id, compare=_exact)
    )
    return rows_for(graded, BuildContext(records, run_id="t"))


def _mixed_problem() -> SimProblem:
    """A problem of medium difficulty, whose trees hold right and wrong answers."""
    return next(p for p in simulated_problems(50, seed=3) if 0.45 < p.difficulty < 0.6)


def test_a_forest_holds_both_trees_under_one_root() -> None:
    problem = _mixed_problem()
    first, second = _search(problem, 6_000, 1), _search(problem, 6_000, 2)
    both = forest(first, second)
    assert len(both.tree) == len(first.tree) + len(second.tree) - 1
    assert len(both.answered_nodes) == len(first.answered_nodes) + len(second.answered_nodes)
    assert both.c_used == first.c_used + second.c_used
    assert both.tokens.policy_output_tokens == (
        first.tokens.policy_output_tokens + second.tokens.policy_output_tokens
    )
    roots = len(first.tree.children(first.tree.root)) + len(second.tree.children(second.tree.root))
    assert len(both.tree.children(both.tree.root)) == roots
    # the first tree keeps its ids, so its chosen node is still the one it chose
    assert both.tree[first.chosen_node_id or 0].text == first.tree[first.chosen_node_id or 0].text
    texts = {both.tree.assistant_text(n) for n in both.answered_nodes}
    assert {second.tree.assistant_text(n) for n in second.answered_nodes} <= texts


def test_uncapped_rows_cut_at_the_caps_are_the_capped_rows() -> None:
    problem = _mixed_problem()
    result = _search(problem, 12_000, 1)
    capped = _rows(problem, result, RECORDS)
    kept = further_rows({}, _rows(problem, result, uncapped(RECORDS)), RECORDS)
    assert capped["dpo"], "the test needs a tree with pairs"
    for table in TABLES:
        assert kept[table] == capped[table], table


def test_a_later_tree_adds_no_row_twice_and_stays_within_the_caps() -> None:
    problem = _mixed_problem()
    first, second = _search(problem, 6_000, 1), _search(problem, 12_000, 2)
    committed = _rows(problem, first, RECORDS)
    added = further_rows(
        committed, _rows(problem, forest(first, second), uncapped(RECORDS)), RECORDS
    )
    for table in TABLES:
        seen = {row_texts(table, r) for r in committed[table]}
        assert not seen & {row_texts(table, r) for r in added[table]}, table
    assert len(committed["sft"]) + len(added["sft"]) <= RECORDS.gates.sft_top_k
    for table in ("dpo", "step_dpo"):
        assert len(committed[table]) + len(added[table]) <= RECORDS.max_pairs_per_problem
    assert sum(len(added[t]) for t in TABLES) > 0
    # the same tree again adds nothing: every row is already there
    again = further_rows(committed, _rows(problem, first, uncapped(RECORDS)), RECORDS)
    assert all(not again[t] for t in TABLES)
