"""`rebuild_records`: a run's rows built again from its ``trees`` and ``tree_nodes`` rows.

The run is four of the real SmolLM2 trees of `tests/fixtures/smollm2_trees.jsonl`, one
of them contaminated, built by `records_for` as a synthesis run builds them.  Rebuilt
under the run's own records config they are the rows the run wrote, row for row; under
other gates they are what `records_for` builds under those gates (the same searches,
other rows).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from pipeline.records import (
    RecordsConfig,
    RecordsSpec,
    Row,
    rebuild_records,
    rebuild_result,
    records_for,
)
from search.answers import AnswerExtraction

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "smollm2_trees.jsonl"
LAST = AnswerExtraction.LAST_NUMBER
WRITTEN = RecordsConfig()  # the run's records config


def _written(config: RecordsConfig) -> dict[str, list[Row]]:
    """The rows a run over the first four fixture trees writes under `config`."""
    entries = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]

    async def build() -> list[dict[str, list[Row]]]:
        return [
            await records_for(
                rebuild_result(e["nodes"], e["tree"]),
                e["tree"]["reference"],
                RecordsSpec(
                    problem_id=str(e["tree"]["problem_id"]),
                    run_id="run-1",
                    config=config,
                    policy_model=e["tree"]["policy_model"],
                    prm_model=e["tree"]["prm_model"],
                    contamination="math500" if i == 3 else None,
                    extraction=LAST,
                ),
            )
            for i, e in enumerate(entries[:4])
        ]

    tables: dict[str, list[Row]] = {}
    for records in asyncio.run(build()):
        for name, rows in records.items():
            tables.setdefault(name, []).extend(rows)
    return tables


@pytest.fixture(scope="module")
def run() -> dict[str, list[Row]]:
    return _written(WRITTEN)


def _rebuilt(run: dict[str, list[Row]], config: RecordsConfig) -> dict[str, list[Row]]:
    nodes: list[dict[str, Any]] = list(run["tree_nodes"])
    random.Random(0).shuffle(nodes)  # a run's rows come in any order
    return asyncio.run(rebuild_records(run["trees"], nodes, config=config, extraction=LAST))


def test_rows_rebuilt_under_the_run_config_are_the_rows_it_wrote(
    run: dict[str, list[Row]],
) -> None:
    again = _rebuilt(run, WRITTEN)
    assert run["sft"] and run["prm"], "the fixture trees give training rows"
    assert run["trees"][3]["contaminated"] == "math500"
    assert again == run


def test_rows_rebuilt_under_other_gates_are_what_those_gates_build(
    run: dict[str, list[Row]],
) -> None:
    other = RecordsConfig(self_correction="include")  # self-correction traces kept too
    again = _rebuilt(run, other)
    assert again == _written(other)
    assert len(again["sft"]) > len(run["sft"]) and len(again["prm"]) > len(run["prm"])
    assert again["tree_nodes"] == run["tree_nodes"]  # the searches are the same


def test_a_tree_without_its_nodes_is_an_error(run: dict[str, list[Row]]) -> None:
    first = run["trees"][0]["problem_id"]
    nodes = [r for r in run["tree_nodes"] if r["problem_id"] != first]
    with pytest.raises(ValueError, match="no root row"):
        asyncio.run(rebuild_records(run["trees"], nodes, config=WRITTEN, extraction=LAST))
