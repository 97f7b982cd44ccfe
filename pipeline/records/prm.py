"""The ``prm`` record: TRL stepwise supervision, every step labelled from the tree below it.

One row per distinct answered trajectory (self-correction traces
included): its steps are the tree nodes on its path.  A step's label comes
from the tree below it, as Math-Shepherd's estimates do from rollouts: an
unanswered step is good (hard label) when at least one answered node in
its subtree is labelled correct, and its soft value is the fraction of
the answered nodes in its subtree that are correct; an answered step
carries its own answer's label (value 1.0 or 0.0), whatever continuations
below it reached.  Every step of a path has at least the path's own
answer below it, so no value is undefined.  Without a reference answer the
labels would be pseudo labels (with ``prm_threshold``, the PRM's own
scores): such problems give no prm rows unless ``prm.pseudo_labels``.
"""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.grading import GradedTree
from pipeline.records.schema import (
    ANSWERS_IN_PATH_DOC,
    LABEL_SOURCE_FIELD,
    PROBLEM_ID_FIELD,
    RUN_ID_FIELD,
    Row,
    doc_field,
    list_of,
    record_schema,
)
from pipeline.records.trajectories import select_paths
from pipeline.records.tree_paths import path_steps, subtree_answers

PRM_SCHEMA = record_schema(
    "prm",
    [
        doc_field(
            "prompt",
            pa.string(),
            "TRL stepwise-supervision format: the problem statement (plain text)",
        ),
        doc_field(
            "completions",
            list_of(pa.string()),
            "the steps of one root-to-answer path, one string per tree node (the first "
            'starts with "Step 1:")',
        ),
        doc_field(
            "labels",
            list_of(pa.bool_()),
            "one per step: an unanswered step is good when a correct answer is reached in "
            "the tree below it; an answered step carries its own answer's label",
        ),
        doc_field(
            "values",
            list_of(pa.float64()),
            "one per step, soft Monte-Carlo value: the fraction of answered nodes below the "
            "step that are correct (an answered step: its own label, 1.0 or 0.0)",
        ),
        doc_field("step_node_ids", list_of(pa.int64()), "the tree node of each step"),
        PROBLEM_ID_FIELD,
        doc_field("node_id", pa.int64(), "the answered node the path ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("answers_in_path", pa.int64(), ANSWERS_IN_PATH_DOC),
        LABEL_SOURCE_FIELD,
        RUN_ID_FIELD,
    ],
)
"""`prm`: step-level labels of every answered path, from the subtree under each step."""


def prm_rows(
    graded: GradedTree, *, run_id: str, dedupe: bool = True, pseudo_labels: bool = False
) -> list[Row]:
    """`prm` rows: one per answered path (distinct trajectory), labels from the subtree.

    Without a reference the labels would be pseudo labels (for ``prm_threshold``,
    the PRM's own scores): the record is then empty unless `pseudo_labels`.
    """
    if graded.pseudo and not pseudo_labels:
        return []
    tree = graded.result.tree
    below = subtree_answers(tree, graded.labels)
    rows: list[Row] = []
    for node, answers in select_paths(graded, graded.answered(), dedupe, "include"):
        path = tree.path(node)
        labels: list[bool] = []
        values: list[float] = []
        for step in path:
            if step.answered:
                label = bool(graded.labels[step.id])
                labels.append(label)
                values.append(float(label))
            else:
                reached = below[step.id]  # never empty: `node` lies below every step
                labels.append(reached.correct > 0)
                values.append(reached.correct / reached.answered)
        rows.append(
            {
                "prompt": graded.result.problem,
                "completions": path_steps(tree, node),
                "labels": labels,
                "values": values,
                "step_node_ids": [step.id for step in path],
                "problem_id": graded.problem_id,
                "node_id": node.id,
                "answer": node.answer,
                "answers_in_path": answers,
                "label_source": graded.label_source,
                "run_id": run_id,
            }
        )
    return rows


__all__ = ["PRM_SCHEMA", "prm_rows"]
