"""The ``tree_nodes`` record: every node of every tree, so relabelling needs only Parquet."""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from common.redact import redact_text
from pipeline.records.context import BuildContext
from pipeline.records.grading import GradedTree
from pipeline.records.schema import Row, doc_field, record_schema, shared_fields

TREE_NODES_SCHEMA = record_schema(
    "tree_nodes",
    [
        *shared_fields("run_id", "problem_id"),
        doc_field("node_id", pa.int64(), "node id within its tree; ids grow in creation order"),
        doc_field(
            "parent_id", pa.int64(), "id of the parent node; null for the root", nullable=True
        ),
        doc_field("depth", pa.int64(), "depth in the tree (the root is 0)"),
        doc_field("d", pa.int64(), "d(x): steps since the nearest answered ancestor (0: answered)"),
        doc_field(
            "text",
            pa.string(),
            "the step the policy generated (boundary excluded); the root: the problem statement",
        ),
        doc_field(
            "inserted_text",
            pa.string(),
            "text the search put before `text` (step boundary, continuation prompt); the "
            "root: the response prefix every trajectory starts with. A trajectory is the "
            "root's inserted_text plus inserted_text + text of every node on its path",
        ),
        doc_field("q", pa.float64(), "the PRM score Q in [0, 1] (the root: 0)"),
        doc_field("answered", pa.bool_(), "the node completed an answer"),
        doc_field("answer", pa.string(), "the last \\boxed{} content; null if none", nullable=True),
        doc_field(
            "label",
            pa.bool_(),
            "answered nodes: the label used for training (see the tree's label_source); "
            "null for unanswered nodes, and for answered ones whose comparison with the "
            "reference was cut off by its time limit (ungraded: no training row uses them)",
            nullable=True,
        ),
        doc_field(
            "finish", pa.string(), "why its generation ended; null for the root", nullable=True
        ),
        doc_field("output_tokens", pa.int64(), "tokens the policy generated for this node"),
        doc_field("inserted_tokens", pa.int64(), "tokens of inserted_text charged to the budget"),
        doc_field("c_used", pa.float64(), "C_used when the node was created, before its own cost"),
        doc_field("iteration", pa.int64(), "expansion order: the search step that created it"),
        doc_field(
            "from_generative", pa.bool_(), "created through the virtual generative child (Eq. 5)"
        ),
        doc_field("full_generation", pa.bool_(), "generated as a whole solution, not one step"),
        doc_field("error", pa.string(), "why generating or scoring it failed", nullable=True),
        *shared_fields("split"),
    ],
)
"""`tree_nodes`: every node of every tree, so relabelling can be redone from Parquet."""


def tree_node_rows(graded: GradedTree, context: BuildContext) -> list[Row]:
    """`tree_nodes` rows: every node of the tree, the root first (see TREE_NODES_SCHEMA)."""
    tree = graded.result.tree
    shared = context.shared_columns(graded, TREE_NODES_SCHEMA)
    rows: list[Row] = []
    for n in tree.nodes:
        root = n.parent_id is None
        rows.append(
            {
                "node_id": n.id,
                "parent_id": n.parent_id,
                "depth": n.depth,
                "d": n.d,
                "text": tree.problem if root else n.text,
                "inserted_text": tree.response_prefix if root else n.inserted_text,
                "q": n.q,
                "answered": n.answered,
                "answer": n.answer,
                "label": graded.label(n) if n.answered else None,
                "finish": None if n.finish is None else n.finish.value,
                "output_tokens": n.output_tokens,
                "inserted_tokens": n.inserted_tokens,
                "c_used": n.c_used,
                "iteration": n.iteration,
                "from_generative": n.from_generative,
                "full_generation": n.full_generation,
                # an engine error may quote its endpoint URL: no credentials in a row
                "error": None if n.error is None else redact_text(n.error),
                **shared,
            }
        )
    return rows


__all__ = ["TREE_NODES_SCHEMA", "tree_node_rows"]
