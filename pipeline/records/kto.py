"""The ``kto`` record: TRL unpaired preference rows, every distinct answered trajectory.

Every distinct answered trajectory of a problem (best Q first), labelled
desirable when correct; the SFT self-correction rule applies to both
labels.
"""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.config import SelfCorrection
from pipeline.records.grading import GradedTree
from pipeline.records.schema import (
    ANSWERS_IN_PATH_DOC,
    LABEL_SOURCE_FIELD,
    MESSAGES_TYPE,
    PROBLEM_ID_FIELD,
    RUN_ID_FIELD,
    Row,
    doc_field,
    record_schema,
)
from pipeline.records.trajectories import assistant_turn, select_paths, user_turn

KTO_SCHEMA = record_schema(
    "kto",
    [
        doc_field(
            "prompt", MESSAGES_TYPE, "TRL unpaired preference format: the user turn (one message)"
        ),
        doc_field("completion", MESSAGES_TYPE, "one assistant message: the full trajectory"),
        doc_field("label", pa.bool_(), "true: desirable (a correct answer), false: undesirable"),
        PROBLEM_ID_FIELD,
        doc_field("node_id", pa.int64(), "the answered node the trajectory ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("score", pa.float64(), "its PRM score Q"),
        doc_field("answers_in_path", pa.int64(), ANSWERS_IN_PATH_DOC),
        LABEL_SOURCE_FIELD,
        RUN_ID_FIELD,
    ],
)
"""`kto`: every distinct answered trajectory with its label."""


def kto_rows(
    graded: GradedTree,
    *,
    run_id: str,
    dedupe: bool = True,
    self_correction: SelfCorrection = "exclude",
) -> list[Row]:
    """`kto` rows: every distinct answered trajectory (best Q first) with its label.

    The same self-correction rule as SFT applies to both labels, so desirable
    rows are the SFT rows (before `min_sft_score`).
    """
    ordered = sorted(graded.answered(), key=lambda n: (-n.q, n.id))
    return [
        {
            "prompt": user_turn(graded),
            "completion": assistant_turn(graded.trajectory(n)),
            "label": bool(graded.labels[n.id]),
            "problem_id": graded.problem_id,
            "node_id": n.id,
            "answer": n.answer,
            "score": n.q,
            "answers_in_path": answers,
            "label_source": graded.label_source,
            "run_id": run_id,
        }
        for n, answers in select_paths(graded, ordered, dedupe, self_correction)
    ]


__all__ = ["KTO_SCHEMA", "kto_rows"]
