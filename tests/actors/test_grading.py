"""Bounded grading: every comparison ends within its limit and the event loop keeps running."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.grading import Verdict, compare, counting, too_costly

REPO = Path(__file__).resolve().parents[2]


def test_the_issue_reproduction_returns_within_its_limit() -> None:
    """The issue's command (a tower of powers as the reference) ran for ever before."""
    code = (
        "import asyncio; from actors.rollout import answers_match as m; "
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
    with counting() as stats:
        start = time.perf_counter()
        assert await compare("42", "9^{9^{9^{9}}}") is Verdict.REJECTED
        assert await compare("9^{9^{9^{9}}}", "9^{9^{9^{9}}}") is Verdict.MATCH  # same text
        assert time.perf_counter() - start < 0.5
    assert (stats.comparisons, stats.timeouts) == (2, 1)


async def test_every_math500_answer_passes_the_filter_and_matches_its_boxed_form() -> None:
    from pipeline.problems.sources import BundledSource, load_problems

    problems = load_problems(BundledSource(dataset="math500")).problems
    references = [p["reference"] or "" for p in problems]
    assert [r for r in references if too_costly(r)] == []
    verdicts = [await compare(f"\\boxed{{{r}}}", r, 30) for r in references]
    assert [r for r, v in zip(references, verdicts, strict=True) if v is not Verdict.MATCH] == []
