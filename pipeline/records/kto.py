"""The ``kto`` record: TRL unpaired preference rows, every distinct answered trajectory.

Every distinct answered trajectory of a problem (best Q first), labelled
desirable when correct, through the gates of the preference pools
(`pipeline.records.pools`): no truncated text, no desirable text with a false
equation or a low step value (the process gates), no self-correction trace, no
near duplicate, and no undesirable text that states the reference.  With
``gates.unpaired_from: mixed`` only problems whose tree holds both right and wrong
answers give rows (``not_mixed``).
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.context import BuildContext, Built, Drops, count
from pipeline.records.grading import GradedTree
from pipeline.records.schema import (
    ANSWERS_IN_PATH_DOC,
    MESSAGES_TYPE,
    doc_field,
    record_schema,
    shared_fields,
)
from pipeline.records.trajectories import assistant_turn, select_paths, user_turn

KTO_SCHEMA = record_schema(
    "kto",
    [
        doc_field(
            "prompt",
            MESSAGES_TYPE,
            "TRL unpaired preference format: the training user turn (one message)",
        ),
        doc_field(
            "completion",
            MESSAGES_TYPE,
            "one assistant message: the trajectory up to the end of its answer statement",
        ),
        doc_field("label", pa.bool_(), "true: desirable (a correct answer), false: undesirable"),
        *shared_fields("problem_id"),
        doc_field("node_id", pa.int64(), "the answered node the trajectory ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("score", pa.float64(), "its PRM score Q"),
        doc_field("answers_in_path", pa.int64(), ANSWERS_IN_PATH_DOC),
        *shared_fields("reference", "difficulty", "split", "label_source", "run_id"),
    ],
)
"""`kto`: every distinct answered trajectory with its label."""


def kto_rows(graded: GradedTree, context: BuildContext) -> Built:
    """`kto` rows: every distinct answered trajectory (best Q first) with its label.

    The same self-correction rule as SFT applies to both labels, so desirable
    rows are the SFT rows before `min_sft_score` and `sft_top_k`.
    """
    config = context.config
    ordered = sorted(graded.answered(), key=lambda n: (-n.q, n.id))
    if config.gates.unpaired_from == "mixed" and graded.difficulty != "mixed":
        drops: Drops = Counter()
        count(drops, "kto.not_mixed", len(ordered))
        return Built([], drops)
    paths, drops = select_paths(
        graded, ordered, config.dedupe, config.self_correction, record="kto", gates=config.gates
    )
    shared = context.shared_columns(graded, KTO_SCHEMA)
    rows = [
        {
            "prompt": user_turn(graded),
            "completion": assistant_turn(graded.training(n).text),
            "label": bool(graded.labels[n.id]),
            "node_id": n.id,
            "answer": n.answer,
            "score": n.q,
            "answers_in_path": answers,
            **shared,
        }
        for n, answers in paths
    ]
    return Built(rows, drops)


__all__ = ["KTO_SCHEMA", "kto_rows"]
