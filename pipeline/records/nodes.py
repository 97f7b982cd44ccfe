"""The ``nodes`` record: every answered node, correct or not, with its full trajectory."""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.context import BuildContext
from pipeline.records.grading import GradedTree
from pipeline.records.schema import Row, doc_field, record_schema, shared_fields

NODES_SCHEMA = record_schema(
    "nodes",
    [
        *shared_fields("run_id", "problem_id"),
        doc_field(
            "node_id", pa.int64(), "node id within its tree (the root, the bare problem, is 0)"
        ),
        doc_field("parent_id", pa.int64(), "id of the parent node (0 for a first step)"),
        doc_field("trajectory", pa.string(), 'full assistant text: "Step 1:" plus every segment'),
        doc_field("answer", pa.string(), "the last \\boxed{} content; null if none", nullable=True),
        doc_field("score", pa.float64(), "the node's PRM score Q in [0, 1]"),
        doc_field(
            "correct",
            pa.bool_(),
            "math-verify verdict against the reference; null without a reference, and when "
            "the comparison was cut off by its time limit (ungraded)",
            nullable=True,
        ),
        doc_field(
            "label",
            pa.bool_(),
            "the label used for SFT/DPO: `correct`, else the pseudo label; null when the "
            "answer is ungraded (no training row uses the node; null in no run written before "
            "ungraded answers)",
            nullable=True,
        ),
        doc_field("pseudo_label", pa.bool_(), "true when `label` is a pseudo label (no reference)"),
        *shared_fields("label_source"),
        doc_field("is_chosen", pa.bool_(), "whether the search chose this node's answer node"),
        doc_field("depth", pa.int64(), "depth in the tree (a first step is 1)"),
        doc_field("iteration", pa.int64(), "the search step that created the node"),
        doc_field("c_used", pa.float64(), "cost units spent when the node was created, before it"),
        doc_field("output_tokens", pa.int64(), "tokens the policy generated for this node"),
        doc_field(
            "finish", pa.string(), "why its generation ended (eos, stop, length...)", nullable=True
        ),
        *shared_fields("method", "policy_model", "prm_model", "budget"),
        doc_field("seed", pa.int64(), "the search's seed"),
        *shared_fields("truncated"),
        doc_field(
            "chars_after_answer",
            pa.int64(),
            "characters of `trajectory` after the answer statement, which training rows leave "
            "out (text the model wrote past its answer)",
        ),
        *shared_fields("split"),
    ],
)
"""`nodes`: one row per answered node of every tree."""


def node_rows(graded: GradedTree, context: BuildContext) -> list[Row]:
    """One `nodes` row per answered node, in answering order."""
    result = graded.result
    shared = context.shared_columns(graded, NODES_SCHEMA)
    rows: list[Row] = []
    for n in graded.answered():
        label = graded.label(n)  # None: ungraded
        rows.append(
            {
                "node_id": n.id,
                "parent_id": n.parent_id,
                "trajectory": graded.trajectory(n),
                "answer": n.answer,
                "score": n.q,
                "correct": None if graded.pseudo else label,
                "label": label,
                "pseudo_label": graded.pseudo,
                "is_chosen": n.id == result.chosen_node_id,
                "depth": n.depth,
                "iteration": n.iteration,
                "c_used": n.c_used,
                "output_tokens": n.output_tokens,
                "finish": None if n.finish is None else n.finish.value,
                "method": result.algorithm,
                "policy_model": context.policy_model,
                "prm_model": context.prm_model,
                "budget": result.budget,
                "seed": result.seed,
                "truncated": graded.training(n).truncated,
                "chars_after_answer": graded.training(n).dropped_chars,
                **shared,
            }
        )
    return rows


__all__ = ["NODES_SCHEMA", "node_rows"]
