"""`rows_and_drops`: each counted drop with the candidate it kept out, the rows unchanged.

The trees are the real SmolLM2 trees of `tests/fixtures/smollm2_trees.jsonl` (graded by
math-verify), under configs that make every kind of gate fire: the default, tight pair
gates, a one-row sft cap, mixed-only kto, near duplicates, prm's unanswered branches.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline.records import RecordsConfig, rows_for
from pipeline.records.context import BuildContext, gate_unit
from pipeline.records.dropped import Dropped, drop_counts, explain_stored_tree, rows_and_drops
from pipeline.records.grading import GradedTree, grade_for_records
from pipeline.records.rebuild import rebuild_result
from search.answers import AnswerExtraction

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "smollm2_trees.jsonl"
LAST = AnswerExtraction.LAST_NUMBER
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "strict": {"gates": {"min_edit_distance": 1000, "min_q_margin": 0.9}},
    "margin": {"gates": {"min_q_margin": 0.1, "sft_top_k": 1}, "max_pairs_per_problem": 8},
    "mixed_only": {"gates": {"unpaired_from": "mixed", "near_duplicate": 0.6}},
    "branches": {"prm": {"unanswered_branches": True}, "gates": {"min_step_value": 0.5}},
}


def _entries() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


def _graded(config: RecordsConfig) -> list[GradedTree]:
    async def grade() -> list[GradedTree]:
        return [
            await grade_for_records(
                rebuild_result(e["nodes"], e["tree"]),
                e["tree"]["reference"],
                problem_id=str(e["tree"]["problem_id"]),
                config=config,
                extraction=LAST,
            )
            for e in _entries()
        ]

    return asyncio.run(grade())


def _gate_drops(records: dict[str, list[dict[str, Any]]]) -> Counter[str]:
    return Counter({d["gate"]: d["dropped"] for d in records["trees"][0]["gate_drops"]})


def test_every_counted_drop_is_named_with_its_candidate_and_the_rows_do_not_change() -> None:
    fired: set[str] = set()
    for name, records_config in CONFIGS.items():
        config = RecordsConfig.model_validate({**records_config, "grade_timeout_s": 120})
        context = BuildContext(config, "run", "policy", "prm")
        for graded in _graded(config):
            records, dropped = rows_and_drops(graded, context)
            assert records == rows_for(graded, context), name  # watching changes nothing
            assert drop_counts(dropped) == _gate_drops(records), (name, graded.problem_id)
            tree = graded.result.tree
            for d in dropped:
                fired.add(d.gate.rsplit(".", 1)[-1])
                assert all(0 < i < len(tree) for i in d.node_ids), d
                if gate_unit(d.gate) == "pairs":
                    chosen, rejected = d.node_ids
                    assert graded.labels[chosen] and not graded.labels[rejected], d
                elif gate_unit(d.gate) == "paths":
                    assert len(d.node_ids) == 1 and tree[d.node_ids[0]].answered, d
            _kept_paths_are_never_named_dropped(records, dropped)
    # the configs made the gates of every unit fire
    assert {"duplicate", "q_margin", "edit_distance", "top_k", "not_mixed"} <= fired, fired


def _kept_paths_are_never_named_dropped(
    records: dict[str, list[dict[str, Any]]], dropped: list[Dropped]
) -> None:
    for table in ("sft", "kto"):
        kept = {row["node_id"] for row in records[table]}
        named = {d.node_ids[0] for d in dropped if d.gate.startswith(f"{table}.")}
        assert not kept & named, table
    pairs = {(r["chosen_node_id"], r["rejected_node_id"]) for r in records["dpo"]}
    assert not pairs & {d.node_ids for d in dropped if d.gate.startswith("dpo.q_")}


def test_a_stored_tree_is_explained_from_its_rows() -> None:
    entry = _entries()[0]
    tree = {**entry["tree"], "run_id": "run", "contaminated": None}
    config = RecordsConfig.model_validate({"gates": {"sft_top_k": 1}})
    records, dropped = asyncio.run(
        explain_stored_tree(tree, entry["nodes"], config=config, extraction=LAST)
    )
    assert drop_counts(dropped) == _gate_drops(records)
    # a contaminated problem gives no training rows, so nothing is dropped from them
    tainted = {**tree, "contaminated": "math500"}
    records, dropped = asyncio.run(
        explain_stored_tree(tainted, entry["nodes"], config=config, extraction=LAST)
    )
    assert dropped == [] and "sft" not in records
