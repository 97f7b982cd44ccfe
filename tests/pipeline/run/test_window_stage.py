"""The night allocator's stream stages in one process: the resume filter, the probe search,
the window stage, the second search and the driver's view of what comes out, chained as
Ray Data chains them (`pipeline.run.synthesis`), on a real run folder.

No Ray: the stages are the callables Ray Data would call, row tables in, row tables out.
The searches are stand-ins that return real SmolLM2 trees from tests/fixtures (one per
place in the selection), graded and built by the real records code; the whole pipeline
on Ray is `test_allocation_run.py`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import RunConfig, parse_run_config
from pipeline.problems.sources import iter_records
from pipeline.records import RecordsSpec
from pipeline.records.allocated import probe_records, second_records
from pipeline.records.errors import error_row
from pipeline.records.rebuild import rebuild_result
from pipeline.run.stream import ResumeFilter, _blocks
from pipeline.run.stream_rows import (
    Problem,
    Records,
    StreamResult,
    map_problems,
    results_of,
    stream_table,
)
from pipeline.run.synthesis import SecondTrees
from pipeline.run.window_stage import WindowStage
from pipeline.store.run_folder import RunFolder, batch_of
from pipeline.store.sink import ParquetSink
from search.answers import AnswerExtraction
from tests.tiny_run import tiny_run_config

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "smollm2_trees.jsonl"
ENTRIES = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
B = 500  # the probe's B (325) holds a fixture tree (C_used 300 at most)


def _solve(config: RunConfig, searched: list[Problem], fail: frozenset[str] = frozenset()) -> Any:
    """The searches' stand-in; a probe of a problem in `fail` fails (an error row)."""

    async def solve(problems: list[Problem]) -> list[Records | None]:
        out: list[Records | None] = []
        for p in problems:
            searched.append(p)
            assert p.index is not None
            if p.tree == "probe" and p.problem_id in fail:
                out.append({"errors": [error_row(p.problem_id, "search", "down", run_id="r")]})
                continue
            entry = ENTRIES[p.index % len(ENTRIES)]
            # searched at the B the stage asked for (a fixture tree spends at most 300)
            budget = p.budget if p.tree == "second" and p.budget else int(0.65 * B)
            result = replace(rebuild_result(entry["nodes"], entry["tree"]), budget=float(budget))
            spec = RecordsSpec(
                p.problem_id, "r", config=config.records, extraction=AnswerExtraction.LAST_NUMBER
            )
            reference = entry["tree"]["reference"]
            if p.tree == "second":
                assert p.carry is not None and p.budget is not None
                probe = p.carry["probe"]
                out.append(await second_records(result, probe, reference, spec, index=p.index))
            else:
                out.append(await probe_records(result, reference, spec, index=p.index))
        return out

    return solve


def _rows(columns: dict[str, list[Any]]) -> Any:
    return stream_table(
        [dict(zip(columns, r, strict=True)) for r in zip(*columns.values(), strict=True)]
    )


def _night(
    config: RunConfig, selection: int, fail: frozenset[str] = frozenset()
) -> tuple[list[StreamResult], list[Problem]]:
    """One invocation: every stage in order; what the driver commits, and what was searched."""
    root = str(config.output_root)
    searched: list[Problem] = []
    solve = _solve(config, searched, fail)
    resume = ResumeFilter(root, "r", allocation=True)
    window = WindowStage(config.model_dump(mode="json"), selection)
    sink = ParquetSink(RunFolder.open(root, "r"))
    held = SecondTrees()
    committed: list[StreamResult] = []
    for block in _blocks(iter_records(config.source)):
        for row in resume(block).to_pylist():  # one row per block, as the stream cuts them
            probed = asyncio.run(map_problems(stream_table([row]).to_pydict(), solve))
            for out in window(_rows(probed)).to_pylist():
                second = asyncio.run(map_problems(stream_table([out]).to_pydict(), solve))
                for result in held.order(results_of(_rows(second))):
                    if result.records:
                        sink.write_batch(result.records)
                    held.committed(result)
                    committed.append(result)
    assert held.rest() == []
    return committed, searched


def _problems(count: int) -> list[dict[str, str]]:
    return [
        {"id": f"p{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)}
        for i in range(count)
    ]


def _allocated(tmp_path: Path, rows: list[dict[str, str]]) -> RunConfig:
    """Windows of 3, and every problem a second tree (min_fraction 0.9)."""
    raw = tiny_run_config(
        tmp_path,
        rows,
        budget=B,
        run_id="r",
        allocation={"enabled": True, "window": 3, "min_fraction": 0.9},
    )
    return parse_run_config(raw)


def test_the_stages_probe_allocate_and_resume_a_killed_night(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _problems(7)
    rows.insert(3, {"id": "bad", "answer": "1"})  # no question: a bad source row, place 3
    config = _allocated(tmp_path, rows)
    committed, searched = _night(config, selection=8)
    probes = [p for p in searched if p.tree == "probe"]
    seconds = [p for p in searched if p.tree == "second"]
    assert sorted(p.index for p in probes if p.index is not None) == [0, 1, 2, 4, 5, 6, 7]
    # min_fraction 0.9: every problem gets a second tree, committed after its window's probes
    assert sorted(p.problem_id for p in seconds) == sorted(p.problem_id for p in probes)
    order = [(r.tree, t["problem_id"]) for r in committed for t in r.records.get("trees", [])]
    for p in seconds:
        window = [q.problem_id for q in probes if (q.index or 0) // 3 == (p.index or 0) // 3]
        assert all(
            order.index(("probe", q)) < order.index(("second", p.problem_id)) for q in window
        )
    folder = RunFolder.open(tmp_path / "out", "r")
    trees = folder.read("trees").to_pylist()
    budgets = {t["problem_id"]: t["budget"] for t in trees if t["tree"] == "second"}
    spent = sum(t["c_used"] for t in trees if t["tree"] == "probe")
    assert spent + sum(budgets.values()) <= 7 * B
    # the window holding the bad row was allocated without it
    assert "bad" not in budgets

    # a rerun of a finished night searches nothing
    assert _night(config, selection=8)[1] == []
    # killed before some second trees were committed: the rerun replays the probes and
    # searches those second trees again, at the same budgets
    for batch, info in folder.batches().items():
        if info.second and any(k.startswith(("p0", "p5")) for k in info.problems):
            folder.store.delete("_committed", batch)
    reads: list[str] = []
    read_part = RunFolder.read_part

    def counted_read(self: RunFolder, part: Any, **kwargs: Any) -> Any:
        reads.append(str(part))
        return read_part(self, part, **kwargs)

    monkeypatch.setattr(RunFolder, "read_part", counted_read)
    _, again = _night(config, selection=8)
    # their probes' records were read back from their probes' batches alone
    probe_batches = {
        name
        for name, batch in folder.batches().items()
        if not batch.second and batch.problems & {"p0", "p5"}
    }
    assert reads and {batch_of(part) for part in reads} == probe_batches
    # searched as the problems they are (the resume filter's rows carry them through)
    assert all(p.problem == f"What is {p.problem_id[1:]} + {p.problem_id[1:]}?" for p in again)
    assert sorted((p.problem_id, p.budget) for p in again) == [
        ("p0", budgets["p0"]),
        ("p5", budgets["p5"]),
    ]


def test_a_probe_that_failed_is_retried_but_its_window_replays_as_allocated(
    tmp_path: Path,
) -> None:
    """A probe that fails leaves its window allocated without it; the rerun retries it and
    keeps its rows, but gives it no second tree, and the window's second trees not yet
    committed get the budgets the failed night gave them."""
    config = _allocated(tmp_path, _problems(6))
    committed, _ = _night(config, selection=6, fail=frozenset({"p1"}))
    folder = RunFolder.open(tmp_path / "out", "r")
    trees = folder.read("trees").to_pylist()
    budgets = {t["problem_id"]: t["budget"] for t in trees if t["tree"] == "second"}
    assert sorted(budgets) == ["p0", "p2", "p3", "p4", "p5"]  # min_fraction: all but p1
    [error] = folder.read("errors").to_pylist()
    assert (error["problem_id"], error["stage"]) == ("p1", "search (probe)")
    # the window's second trees are committed after the failed probe's error row
    order = [(r.tree, row["problem_id"]) for r in committed for row in r.records.get("trees", [])]
    failed_at = next(i for i, r in enumerate(committed) if r.records.get("errors"))
    assert all(order.index(("second", p)) >= failed_at for p in ("p0", "p2"))

    # killed before p0's second tree was committed; the rerun retries p1's probe
    for batch, info in folder.batches().items():
        if info.second and any(k.startswith("p0") for k in info.problems):
            folder.store.delete("_committed", batch)
    _, again = _night(config, selection=6)
    assert sorted((p.problem_id, p.tree, p.budget) for p in again) == [
        ("p0", "second", budgets["p0"]),  # the budget the failed night gave it
        ("p1", "probe", None),  # retried, and given no second tree
    ]
    trees = folder.read("trees").to_pylist()
    assert sorted(t["tree"] for t in trees if t["problem_id"] == "p1") == ["probe"]
    probes_spent = sum(
        t["c_used"] for t in trees if t["tree"] == "probe" and t["problem_id"] != "p1"
    )
    seconds = sum(t["budget"] for t in trees if t["tree"] == "second")
    assert probes_spent + seconds <= 6 * B  # the night's total, p1's retry aside
    # a third invocation finds nothing left to do
    assert _night(config, selection=6)[1] == []
