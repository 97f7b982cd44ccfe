"""The wall-time cap (`max_wall_s`, `pipeline.run.wall`): its config fields, the stop at a
tree boundary that the search actors apply, and the rows it leaves in the stream.

The cap on a real nightly run (a night cut mid-slice, published, then resumed by its rerun)
is in test_nightly.py.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import ConfigError, parse_run_config
from pipeline.run.stream_rows import (
    Problem,
    Records,
    map_problems,
    problem_row,
    results_of,
    stream_table,
)
from pipeline.run.wall import WallCap


def _config(tmp_path: Path, **fields: Any) -> dict[str, Any]:
    return {
        "output_root": str(tmp_path),
        "source": {"kind": "bundled", "dataset": "gsm8k"},
        "search": {"algorithm": "bg_mcts"},
        **fields,
    }


def test_no_cap_by_default(tmp_path: Path) -> None:
    config = parse_run_config(_config(tmp_path))
    assert config.max_wall_s is None
    assert WallCap.start(config) is None


@pytest.mark.parametrize("value", [0, -1, -0.5])
def test_a_cap_that_is_not_positive_is_refused_naming_the_field(
    tmp_path: Path, value: float
) -> None:
    with pytest.raises(ConfigError, match=r"^nightly\.yaml: max_wall_s: .*greater than 0"):
        parse_run_config(_config(tmp_path, max_wall_s=value), "nightly.yaml")


def test_an_infinite_cap_and_a_negative_grace_are_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"max_wall_s: inf is not a finite number"):
        parse_run_config(_config(tmp_path, max_wall_s=float("inf")))
    with pytest.raises(ConfigError, match=r"wall_grace_s: .*greater than or equal to 0"):
        parse_run_config(_config(tmp_path, max_wall_s=60, wall_grace_s=-1))


def test_the_cap_counts_from_the_jobs_start(tmp_path: Path) -> None:
    config = parse_run_config(_config(tmp_path, max_wall_s=3600, wall_grace_s=120))
    cap = WallCap.start(config, started=1_000.0)
    assert cap == WallCap(stop_at=4_600.0, grace_s=120.0)
    assert cap.abandon_at == 4_720.0
    assert cap.up()  # 4,600 s after the epoch is long past
    assert not WallCap(stop_at=time.time() + 60, grace_s=0).up()


def test_a_tree_in_flight_finishes_within_the_grace() -> None:
    cap = WallCap(stop_at=time.time(), grace_s=5.0)  # the cap is up; 5 s of grace left

    async def tree() -> str:
        await asyncio.sleep(0.01)
        return "records"

    assert asyncio.run(cap.finish(tree())) == "records"


def test_a_tree_still_running_after_the_grace_is_cancelled_and_gives_nothing() -> None:
    cap = WallCap(stop_at=time.time(), grace_s=0.05)
    ended: list[str] = []

    async def tree() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        return "records"

    start = time.monotonic()
    assert asyncio.run(cap.finish(tree())) is None
    assert ended == ["cancelled"]
    assert time.monotonic() - start < 5


def test_a_trees_own_timeout_is_not_taken_for_the_cap() -> None:
    cap = WallCap(stop_at=time.time() + 60, grace_s=60)

    async def tree() -> str:
        raise TimeoutError("the engine's own timeout")

    with pytest.raises(TimeoutError, match="the engine's own"):
        asyncio.run(cap.finish(tree()))


def test_a_problem_left_at_the_cap_is_a_stopped_row_with_nothing_to_commit() -> None:
    rows = [
        problem_row({"problem_id": f"p{i}", "problem": f"{i}+{i}?", "reference": str(2 * i)})
        for i in range(3)
    ]

    async def solve(problems: list[Problem]) -> list[Records | None]:
        # p1: searched before the cap; the others: not started, or abandoned in flight
        return [
            {"trees": [{"problem_id": p.problem_id}]} if p.problem_id == "p1" else None
            for p in problems
        ]

    out = asyncio.run(map_problems(stream_table(rows).to_pydict(), solve))
    table = stream_table(
        [dict(zip(out, row, strict=True)) for row in zip(*out.values(), strict=True)]
    )
    results = list(results_of(table))
    assert [r.kind for r in results] == ["stopped", "problem", "stopped"]
    assert [r.records for r in results] == [{}, {"trees": [{"problem_id": "p1"}]}, {}]
