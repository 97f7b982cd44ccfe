"""A search result rebuilt from a run's ``tree_nodes`` and ``trees`` rows.

``tree_nodes`` holds every node of every tree so that any relabelling can be redone
from Parquet alone: `rebuild_result` rebuilds the `SearchResult` a search returned
(the tree node by node, its token counts and stop reason), and `records_for` then
gives every record type again under today's rules.  The tests' fixture of real
SmolLM2 trees (`tests/fixtures/`) is rebuilt this way, and so can any old run be.
(Not to be confused with `actors.replay`, which replays a run's paid requests.)
The anytime trace is not kept per node, so the rebuilt result has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from search.driver import SearchResult
from search.protocols import FinishReason, TokenCounts
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
    tokens = TokenCounts(
        policy_output=int(tree["policy_output_tokens"]),
        policy_input=int(tree["policy_input_tokens"]),
        inserted_prompt=int(tree["inserted_prompt_tokens"]),
        prm_input=int(tree["prm_input_tokens"]),
        prm_output=int(tree["prm_output_tokens"]),
    )
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


__all__ = ["rebuild_result"]
