"""A search result rebuilt from a run's ``tree_nodes`` and ``trees`` rows.

``tree_nodes`` holds every node of every tree so that any relabelling can be redone
from Parquet alone: `rebuild_result` rebuilds the `SearchResult` a search returned
(the tree node by node, its token counts and stop reason), and `records_for` then
gives every record type again under today's rules.  The tests' fixture of real
SmolLM2 trees (`tests/fixtures/`) is rebuilt this way, and so can any old run be:
`rebuild_records` does it for a whole run's rows, under a records config of the
caller's (the same searches under other gates, or an old run under today's rules).
(Not to be confused with `actors.replay`, which replays a run's paid requests.)
The anytime trace is not kept per node, so the rebuilt result has none.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actors.prompts import POLICY_INSTRUCTION
from pipeline.records.build import records_for
from pipeline.records.config import RecordsConfig
from pipeline.records.schema import Row
from pipeline.records.spec import RecordsSpec
from search.answers import AnswerExtraction
from search.driver import SearchResult
from search.protocols import TOKEN_KINDS, FinishReason, TokenCounts
from search.tree import Tree


def rebuild_result(nodes: Sequence[Mapping[str, Any]], tree: Mapping[str, Any]) -> SearchResult:
    """The result of one search from its ``tree_nodes`` rows and its ``trees`` row."""
    ordered = sorted(nodes, key=lambda r: int(r["node_id"]))
    if not ordered or ordered[0]["parent_id"] is not None:
        raise ValueError(f"problem {tree.get('problem_id')!r}: tree_nodes has no root row")
    root = ordered[0]
    rebuilt = Tree(str(root["text"]), str(root["inserted_text"]))
    for row in ordered[1:]:
        if int(row["node_id"]) != len(rebuilt):
            raise ValueError(f"problem {tree.get('problem_id')!r}: node ids are not 0..n-1")
        rebuilt.add_child(
            rebuilt[int(row["parent_id"])],
            text=str(row["text"]),
            inserted_text=str(row["inserted_text"]),
            q=float(row["q"]),
            answered=bool(row["answered"]),
            answer=row["answer"],
            finish=FinishReason(row["finish"]),
            output_tokens=int(row["output_tokens"]),
            inserted_tokens=int(row["inserted_tokens"]),
            full_generation=bool(row["full_generation"]),
            from_generative=bool(row["from_generative"]),
            iteration=int(row["iteration"]),
            c_used=float(row["c_used"]),
            error=row["error"],
        )
    # the counters are named as the columns; the engines' cache reads are absent from runs
    # written before they were counted
    tokens = TokenCounts(**{kind: int(tree.get(kind) or 0) for kind in TOKEN_KINDS})
    return SearchResult(
        problem=rebuilt.problem,
        algorithm=str(tree["method"]),
        seed=int(tree["seed"]),
        budget=float(tree["budget"]),
        c_used=float(tree["c_used"]),
        tree=rebuilt,
        chosen_answer=tree["chosen_answer"],
        chosen_node_id=tree["chosen_node_id"],
        tokens=tokens,
        trace=[],
        stop_reason=str(tree["stop_reason"]),
        iterations=int(tree["iterations"]),
        wall_time_s=float(tree["wall_time_s"]),
    )


async def rebuild_records(
    trees: Sequence[Mapping[str, Any]],
    tree_nodes: Iterable[Mapping[str, Any]],
    *,
    config: RecordsConfig,
    extraction: AnswerExtraction,
    instruction: str = POLICY_INSTRUCTION,
) -> dict[str, list[Row]]:
    """Every record type's rows of a run's trees built again under `config`, each table's
    rows in the order of `trees`.

    `trees` and `tree_nodes` are the run's rows of those two tables (any order; a tree's
    nodes are found by ``problem_id``).  Each tree keeps what its row says of it: its
    reference, run id, models and contamination.  `extraction` is the run's
    `search.answer_extraction` and `instruction` its `policy.prompts.policy_instruction`
    (neither is in the rows: they are the run's config, and the training texts and
    prompts depend on them).
    """
    nodes: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in tree_nodes:
        nodes[str(row["problem_id"])].append(row)
    built = await asyncio.gather(
        *(
            records_for(
                rebuild_result(nodes[str(tree["problem_id"])], tree),
                tree["reference"],
                RecordsSpec(
                    problem_id=str(tree["problem_id"]),
                    run_id=str(tree["run_id"]),
                    config=config,
                    policy_model=tree["policy_model"],
                    prm_model=tree["prm_model"],
                    contamination=tree["contaminated"],
                    instruction=instruction,
                    extraction=extraction,
                ),
            )
            for tree in trees
        )
    )
    tables: dict[str, list[Row]] = defaultdict(list)
    for records in built:
        for name, rows in records.items():
            tables[name].extend(rows)
    return dict(tables)


__all__ = ["rebuild_records", "rebuild_result"]
