"""A problem's probe and second tree as the night allocator's search actor records them
(`pipeline.records.allocated`).  Real SmolLM2 trees from tests/fixtures, graded and built
by the real builders; the probe's records go through JSON, as the stream carries them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pipeline.records import SCHEMAS, RecordsConfig, RecordsSpec, records_for, to_table
from pipeline.records.allocated import probe_records, second_records
from pipeline.records.rebuild import rebuild_result
from search.answers import AnswerExtraction

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "smollm2_trees.jsonl"
TRAINING = ("sft", "dpo", "step_dpo", "prm", "kto")


def _entry(i: int) -> dict[str, Any]:
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    entry: dict[str, Any] = json.loads(lines[i])
    return entry


def test_a_probe_and_its_second_tree_are_one_problem_with_no_row_twice() -> None:
    entry = _entry(0)
    result = rebuild_result(entry["nodes"], entry["tree"])
    reference = entry["tree"]["reference"]
    spec = RecordsSpec("p", "r", config=RecordsConfig(), extraction=AnswerExtraction.LAST_NUMBER)
    probe = asyncio.run(probe_records(result, reference, spec, index=7))
    plain = asyncio.run(records_for(result, reference, spec))
    # the probe's rows are the rows of the one tree a run would write, its trees row tagged
    assert {k: v for k, v in probe.items() if k != "trees"} == {
        k: v for k, v in plain.items() if k != "trees"
    }
    tree = probe["trees"][0]
    assert tree["tree"] == "probe" and tree["source_index"] == 7
    assert tree["n_correct"] + tree["n_incorrect"] <= tree["n_answered"]
    assert {r["table"]: r["rows"] for r in tree["kept_rows"]} == {
        t: len(probe[t]) for t in TRAINING
    }
    carried = json.loads(json.dumps(probe))
    # the same search again as the second tree: every training row is a duplicate
    second = asyncio.run(second_records(result, carried, reference, spec, index=7))
    for kind, rows in second.items():
        to_table(rows, SCHEMAS[kind])  # every row of its table's schema
    assert all(second[t] == [] for t in ("sft", "dpo", "step_dpo", "prm", "kto"))
    # its nodes continue the probe's ids below the one root
    n = len(result.tree)
    ids = [r["node_id"] for r in second["tree_nodes"]]
    assert ids == list(range(n, 2 * n - 1))
    roots = [r for r in second["tree_nodes"] if r["parent_id"] == 0]
    assert len(roots) == sum(1 for r in probe["tree_nodes"] if r["parent_id"] == 0)
    both = rebuild_result(probe["tree_nodes"] + second["tree_nodes"], probe["trees"][0])
    assert len(both.tree) == 2 * n - 1
    own = second["trees"][0]
    assert own["tree"] == "second" and own["c_used"] == tree["c_used"]
    assert own["chosen_node_id"] == (
        None if result.chosen_node_id is None else result.chosen_node_id + n - 1
    )
    chosen = [r["node_id"] for r in second["nodes"] if r["is_chosen"]]
    assert chosen == ([] if own["chosen_node_id"] is None else [own["chosen_node_id"]])
