"""The two Parquet tables an evaluation writes; every number in the report comes from them.

`eval_trees.parquet` has one row per (method, budget, seed, problem) with the
anytime trace nested in it; `eval_nodes.parquet` has one row per node of every
tree (PRM percentiles, answered-node statistics and tree pictures read it).  A field
that means what a synthesis run's `trees` or `tree_nodes` field of the same name means
is that field (`_tree`, `_node`): declared once, in `pipeline.records`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records import TRACE_POINT as TREES_TRACE_POINT
from pipeline.records import (
    TREE_NODES_SCHEMA,
    TREES_SCHEMA,
    YIELD_FIELDS,
    doc_field,
    record_schema,
)

_tree = TREES_SCHEMA.field
_node = TREE_NODES_SCHEMA.field
_point = TREES_TRACE_POINT.field

# The `trees` trace point, with two counts the report's curves read besides.
TRACE_POINT = pa.struct(
    [
        _point("c_used"),
        _point("any_answer"),
        _point("correct"),
        pa.field("n_answered", pa.int64(), nullable=False),
        _point("max_depth"),
        _point("max_width"),
        pa.field("generative", pa.int64(), nullable=False),
    ]
)

_KEY = [
    doc_field("method", pa.string(), "method label of the grid (an algorithm plus its overrides)"),
    doc_field("algorithm", pa.string(), "search algorithm"),
    doc_field("budget", pa.int64(), "nominal budget B (cost units; output tokens by default)"),
    doc_field("seed", pa.int64(), "grid seed; the search seed derives from it and the problem_id"),
    _tree("problem_id"),
]

EVAL_TREES_SCHEMA = record_schema(
    "eval_trees",
    [
        *_KEY,
        _tree("reference"),
        _tree("chosen_answer"),
        doc_field(
            "correct",
            pa.bool_(),
            "chosen answer equals the reference (false when none); null when its comparison "
            "was cut off by the grading time limit (unknown: the report's accuracy counts it "
            "as not correct, a lower bound, and says how many)",
            nullable=True,
        ),
        doc_field("answered", pa.bool_(), "the tree holds at least one answered node"),
        _tree("c_used"),
        doc_field("early_stopped", pa.bool_(), "the search stopped before B (LiteSearch's rule)"),
        _tree("stop_reason"),
        _tree("iterations"),
        doc_field("n_nodes", pa.int64(), "nodes in the tree, root included"),
        doc_field("answered_nodes", pa.int64(), "answered nodes"),
        doc_field("correct_nodes", pa.int64(), "answered nodes whose answer is correct"),
        *map(_tree, ("max_depth", "max_width", "policy_output_tokens", "policy_input_tokens")),
        *map(_tree, ("prm_input_tokens", "prm_output_tokens", "wall_time_s")),
        *YIELD_FIELDS,
        pa.field(
            "trace",
            pa.list_(pa.field("element", TRACE_POINT, nullable=False)),
            nullable=False,
            metadata={
                "description": "state after every search step: C_used, whether any answer "
                "exists, whether the current chosen answer is correct (false when its "
                "comparison was cut off), answered count, max depth/width, generative-child "
                "expansions in that step"
            },
        ),
    ],
)

EVAL_NODES_SCHEMA = record_schema(
    "eval_nodes",
    [
        *_KEY,
        *map(_node, ("node_id", "parent_id", "depth", "iteration", "c_used", "q", "answered")),
        doc_field(
            "correct",
            pa.bool_(),
            "answered and its answer is correct; null when unanswered, or when its comparison "
            "was cut off by the grading time limit",
            nullable=True,
        ),
        _node("from_generative"),
        _node("full_generation"),
        doc_field("failed", pa.bool_(), "generation or scoring failed for the node"),
        _node("output_tokens"),
    ],
)

EVAL_TABLES: dict[str, Any] = {"eval_trees": EVAL_TREES_SCHEMA, "eval_nodes": EVAL_NODES_SCHEMA}
