"""Bounded grading: every comparison ends within its limit and the event loop keeps running."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.grading import Verdict, compare, compare_all, counting, too_costly

REPO = Path(__file__).resolve().parents[2]


def test_the_issue_reproduction_returns_within_its_limit() -> None:
    """The issue's command (a tower of powers as the reference) ran for ever before."""
    code = (
        "import asyncio; from common.grading import answers_match as m; "
        "print(asyncio.run(m('42', '9^{9^{9^{9}}}', timeout_s=2)))"
    )
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr
    assert time.monotonic() - start < 60


async def _ticks_while(coro: object, every_s: float = 0.05) -> tuple[object, int, float]:
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(every_s)
            ticks += 1

    task = asyncio.create_task(ticker())
    start = time.perf_counter()
    result = await coro  # type: ignore[misc]
    elapsed = time.perf_counter() - start
    done.set()
    await task
    return result, ticks, elapsed


async def test_a_comparison_sympy_cannot_finish_times_out_and_the_loop_keeps_running() -> None:
    # Passes the cheap filter (no literal tower, small literals) but sympy never finishes:
    # the worker process is killed at the limit and replaced.
    assert too_costly("(9999^{9999})^{9999}") is None
    await compare("\\frac{1}{2}", "0.5", 30)  # a warm pool: the limit is not spent starting it
    with counting() as stats:
        verdict, ticks, elapsed = await _ticks_while(
            compare("42", "(9999^{9999})^{9999}", timeout_s=1.0)
        )
    assert verdict is Verdict.TIMEOUT
    assert elapsed < 1.0 + 3.0
    assert ticks >= 0.5 * elapsed / 0.05  # the event loop ran all along
    assert (stats.comparisons, stats.timeouts) == (1, 1)
    # the replaced worker grades the next comparison normally
    assert await compare("\\frac{1}{2}", "0.5", 30) is Verdict.MATCH


@pytest.mark.parametrize(
    "text",
    ["9^{9^{9^{9}}}", "9^9^9", "2**3**4", "(9^9)^(9^9)", "9^{99999}", "1" * 400, "x" * 2000],
)
def test_costly_inputs_are_rejected_before_sympy(text: str) -> None:
    assert too_costly(text) is not None


async def test_rejected_comparisons_count_as_timeouts_and_no_match() -> None:
    await compare("\\frac{1}{2}", "0.5", 30)  # a warm pool
    start = time.perf_counter()
    await compare("\\frac{1}{3}", "0.25", 30)
    one_sympy_comparison = time.perf_counter() - start
    with counting() as stats:
        start = time.perf_counter()
        assert await compare("42", "9^{9^{9^{9}}}") is Verdict.REJECTED
        assert await compare("9^{9^{9^{9}}}", "9^{9^{9^{9}}}") is Verdict.MATCH  # same text
        # neither went to sympy: both together take less than one comparison there (a
        # relative bound: a loaded machine slows both sides)
        assert time.perf_counter() - start < one_sympy_comparison
    assert (stats.comparisons, stats.timeouts) == (2, 1)


async def test_every_math500_answer_passes_the_filter_and_matches_its_boxed_form() -> None:
    from pipeline.problems.sources import BundledSource, load_problems

    problems = load_problems(BundledSource(dataset="math500")).problems
    references = [p["reference"] or "" for p in problems]
    assert [r for r in references if too_costly(r)] == []
    verdicts = [await compare(f"\\boxed{{{r}}}", r, 30) for r in references]
    assert [r for r, v in zip(references, verdicts, strict=True) if v is not Verdict.MATCH] == []


async def test_majority_grading_of_slow_answers_ends_within_one_limit() -> None:
    """A tree without a reference whose distinct answers sympy cannot compare was once
    graded pair after pair (one limit per pair: 15 limits for 6 answers); now every
    comparison is scheduled at once and the batch shares one limit (plus the pool-start
    margin), like the reference path."""
    from pipeline.records import grade_result
    from search.driver import SearchResult
    from search.protocols import FinishReason, TokenCounts
    from search.tree import Tree

    slow = [f"({b}^{{9999}})^{{9999}}" for b in (9999, 9998, 9997, 9996, 9995, 9994)]
    assert all(too_costly(a) is None for a in slow)
    tree = Tree("p")
    for answer in slow:
        tree.add_child(
            tree.root,
            text=f" The answer is $\\boxed{{{answer}}}$.",
            q=0.5,
            answered=True,
            answer=answer,
            finish=FinishReason.EOS,
            output_tokens=5,
        )
    result = SearchResult("p", "bg_mcts", 0, 10, 10, tree, None, None, TokenCounts(), [], "x", 1, 0)
    await compare("\\frac{1}{2}", "0.5", 30)  # a warm pool
    limit = 1.0
    with counting() as stats:
        start = time.perf_counter()
        graded = await grade_result(
            result, None, problem_id="p", pseudo_label="majority", timeout_s=limit
        )
        elapsed = time.perf_counter() - start
    # 15 pairs, each timing out: serially 15 limits; the pool of 2 alone would take 8
    assert stats.comparisons == 15 and stats.timeouts == 15
    assert elapsed < limit + 1.0 + 2.0, elapsed  # one limit + the batch margin + slack
    # no pair matched: every answer is its own group; the first reached wins the tie
    assert [graded.labels[n.id] for n in tree.answered_nodes()] == [True] + [False] * 5


async def test_compare_all_keeps_the_order_and_counts() -> None:
    pairs = [("\\frac{1}{2}", "0.5"), ("3", "4"), ("2", "2"), ("9^{9^{9}}", "1")]
    with counting() as stats:
        verdicts = await compare_all(pairs, timeout_s=10)
    assert verdicts == [Verdict.MATCH, Verdict.NO_MATCH, Verdict.MATCH, Verdict.REJECTED]
    assert stats.comparisons == 4 and stats.timeouts == 1
