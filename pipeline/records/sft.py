"""The ``sft`` record: TRL prompt-completion rows from the trajectories labelled correct.

The answered nodes labelled correct (by reference or pseudo label) with
Q >= ``min_score``, best Q first; with ``dedupe`` only the best-Q node of
identical trajectories (exact assistant text) is kept.  By default only
*clean* paths are kept: the node's answer is the only one on its path
(``answers_in_path == 1``).  A path that answered earlier and went on with
the continuation prompt ("But wait, let me think about the problem
again.") is a self-correction trace; most such traces state a wrong answer
first, so SFT on them teaches answering wrong first.
``sft.self_correction: include`` keeps them too, ``only`` keeps only them.
Nobody in this project reads a ``messages`` column, so there is none: TRL
trains on every token of ``messages`` data (SmolLM2's template has no
``{% generation %}`` markers for ``assistant_only_loss``).
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

SFT_SCHEMA = record_schema(
    "sft",
    [
        doc_field(
            "prompt",
            MESSAGES_TYPE,
            "TRL conversational prompt-completion format: the policy's user turn (one message)",
        ),
        doc_field(
            "completion",
            MESSAGES_TYPE,
            "one assistant message: the full trajectory (TRL trains on these tokens only)",
        ),
        PROBLEM_ID_FIELD,
        doc_field("node_id", pa.int64(), "the answered node the trajectory ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("score", pa.float64(), "its PRM score Q"),
        doc_field("depth", pa.int64(), "steps in the trajectory"),
        doc_field("answers_in_path", pa.int64(), ANSWERS_IN_PATH_DOC),
        LABEL_SOURCE_FIELD,
        RUN_ID_FIELD,
    ],
)
"""`sft`: supervised fine-tuning rows from correct answered nodes."""


def sft_rows(
    graded: GradedTree,
    *,
    run_id: str,
    min_score: float = 0.0,
    dedupe: bool = True,
    self_correction: SelfCorrection = "exclude",
) -> list[Row]:
    """`sft` rows from the nodes labelled correct with Q >= `min_score`, best Q first.

    `self_correction` keeps clean paths only (``exclude``: the last node holds
    the path's only answer), every path (``include``), or only the paths that
    answered before (``only``).
    """
    picked = sorted(
        (n for n in graded.answered() if graded.labels[n.id] and n.q >= min_score),
        key=lambda n: (-n.q, n.id),
    )
    return [
        {
            "prompt": user_turn(graded),
            "completion": assistant_turn(graded.trajectory(n)),
            "problem_id": graded.problem_id,
            "node_id": n.id,
            "answer": n.answer,
            "score": n.q,
            "depth": n.depth,
            "answers_in_path": answers,
            "label_source": graded.label_source,
            "run_id": run_id,
        }
        for n, answers in select_paths(graded, picked, dedupe, self_correction)
    ]


__all__ = ["SFT_SCHEMA", "sft_rows"]
