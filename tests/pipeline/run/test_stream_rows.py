"""The problem stream's rows, one step at a time: source row -> stream row -> the search
stage's output -> what the driver commits (`pipeline.run.stream_rows`)."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.run.stream_rows import (
    Problem,
    Records,
    map_problems,
    problem_row,
    results_of,
    source_error,
    source_row,
    stream_table,
    tally_row,
)


def test_a_source_record_is_a_problem_row_or_an_error_row() -> None:
    good = source_row({"problem_id": "a", "problem": "1+1?", "reference": "2"})
    message = "row 3: 'question' is empty"
    bad = source_row({"problem_id": "b", "stage": "source", "message": message})
    assert source_error(good) is None
    assert good["problem"] == "1+1?"
    assert source_error(bad) == message
    assert bad["problem"] is None


def test_the_search_stage_fills_problem_rows_and_passes_tallies_through() -> None:
    rows = [
        problem_row({"problem_id": "p/0", "problem": "2+2?", "reference": "4"}),
        tally_row([{"problem_id": "x", "message": "bad"}], skipped=2),
        problem_row({"problem_id": "p/1", "problem": "3+3?", "reference": None}),
    ]
    batch = stream_table(rows).to_pydict()
    seen: list[Problem] = []

    async def solve(problems: list[Problem]) -> list[Records]:
        seen.extend(problems)
        return [{"trees": [{"problem_id": p.problem_id}]} for p in problems]

    out = asyncio.run(map_problems(batch, solve))
    assert seen == [Problem("p/0", "2+2?", "4"), Problem("p/1", "3+3?", None)]
    # the driver needs only the records: the problem text does not travel back
    assert out["problem"] == [None, None, None]

    table = stream_table(
        [dict(zip(out, row, strict=True)) for row in zip(*out.values(), strict=True)]
    )
    results = list(results_of(table))
    assert [r.kind for r in results] == ["problem", "tally", "problem"]
    assert results[0].records == {"trees": [{"problem_id": "p/0"}]}
    assert results[1].records == {"errors": [{"problem_id": "x", "message": "bad"}]}
    assert results[1].skipped == 2


def test_a_solver_that_returns_the_wrong_count_fails_loudly() -> None:
    batch = stream_table([problem_row({"problem_id": "p", "problem": "?", "reference": None})])

    async def solve(problems: list[Problem]) -> list[Records]:
        return []

    with pytest.raises(ValueError):
        asyncio.run(map_problems(batch.to_pydict(), solve))
