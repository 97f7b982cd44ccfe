"""The two Parquet tables an evaluation writes; every number in the report comes from them.

`eval_trees.parquet` has one row per (method, budget, seed, problem) with the
anytime trace nested in it; `eval_nodes.parquet` has one row per node of every
tree (PRM percentiles, answered-node statistics and tree pictures read it).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records import YIELD_FIELDS, doc_field, record_schema

TRACE_POINT = pa.struct(
    [
        pa.field("c_used", pa.float64(), nullable=False),
        pa.field("any_answer", pa.bool_(), nullable=False),
        pa.field("correct", pa.bool_(), nullable=False),
        pa.field("n_answered", pa.int64(), nullable=False),
        pa.field("max_depth", pa.int64(), nullable=False),
        pa.field("max_width", pa.int64(), nullable=False),
        pa.field("generative", pa.int64(), nullable=False),
    ]
)

_KEY = [
    doc_field("method", pa.string(), "method label of the grid (an algorithm plus its overrides)"),
    doc_field("algorithm", pa.string(), "search algorithm"),
    doc_field("budget", pa.int64(), "nominal budget B (cost units; output tokens by default)"),
    doc_field("seed", pa.int64(), "grid seed; the search seed derives from it and the problem_id"),
    doc_field("problem_id", pa.string(), "identifier of the problem"),
]

EVAL_TREES_SCHEMA = record_schema(
    "eval_trees",
    [
        *_KEY,
        doc_field("reference", pa.string(), "reference answer", nullable=True),
        doc_field("chosen_answer", pa.string(), "the search's final answer", nullable=True),
        doc_field("correct", pa.bool_(), "chosen answer equals the reference (false when none)"),
        doc_field("answered", pa.bool_(), "the tree holds at least one answered node"),
        doc_field("c_used", pa.float64(), "budget consumed, C_used <= B"),
        doc_field("early_stopped", pa.bool_(), "the search stopped before B (LiteSearch's rule)"),
        doc_field(
            "stop_reason", pa.string(), "budget_exhausted | early_stop | algorithm_done | stalled"
        ),
        doc_field("iterations", pa.int64(), "search steps"),
        doc_field("n_nodes", pa.int64(), "nodes in the tree, root included"),
        doc_field("answered_nodes", pa.int64(), "answered nodes"),
        doc_field("correct_nodes", pa.int64(), "answered nodes whose answer is correct"),
        doc_field("max_depth", pa.int64(), "maximum depth"),
        doc_field("max_width", pa.int64(), "maximum number of nodes at one depth"),
        doc_field("policy_output_tokens", pa.int64(), "policy output tokens"),
        doc_field("policy_input_tokens", pa.int64(), "policy prompt tokens (uncharged by default)"),
        doc_field("prm_input_tokens", pa.int64(), "PRM input tokens"),
        doc_field("prm_output_tokens", pa.int64(), "PRM output tokens"),
        doc_field("wall_time_s", pa.float64(), "wall time of the search"),
        *YIELD_FIELDS,
        pa.field(
            "trace",
            pa.list_(pa.field("element", TRACE_POINT, nullable=False)),
            nullable=False,
            metadata={
                "description": "state after every search step: C_used, whether any answer "
                "exists, whether the current chosen answer is correct, answered count, "
                "max depth/width, generative-child expansions in that step"
            },
        ),
    ],
)

EVAL_NODES_SCHEMA = record_schema(
    "eval_nodes",
    [
        *_KEY,
        doc_field("node_id", pa.int64(), "node id; 0 is the root (the bare problem)"),
        doc_field("parent_id", pa.int64(), "parent node id (null for the root)", nullable=True),
        doc_field("depth", pa.int64(), "depth; the root is 0"),
        doc_field("iteration", pa.int64(), "search step that created the node (expansion order)"),
        doc_field("c_used", pa.float64(), "C_used when the node was created"),
        doc_field("q", pa.float64(), "Q(x), the PRM score"),
        doc_field("answered", pa.bool_(), "the node ends with a final answer (App. A)"),
        doc_field("correct", pa.bool_(), "answered and its answer is correct", nullable=True),
        doc_field(
            "from_generative", pa.bool_(), "created by widening through the generative child"
        ),
        doc_field("full_generation", pa.bool_(), "a whole solution rather than one step"),
        doc_field("failed", pa.bool_(), "generation or scoring failed for the node"),
        doc_field("output_tokens", pa.int64(), "policy output tokens of the node"),
    ],
)

EVAL_TABLES: dict[str, Any] = {"eval_trees": EVAL_TREES_SCHEMA, "eval_nodes": EVAL_NODES_SCHEMA}
