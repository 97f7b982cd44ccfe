"""The ``kto`` record: TRL unpaired preference rows, every distinct answered trajectory.

Every distinct answered trajectory of a problem (best Q first), labelled
desirable when correct, through the gates the preference pools pass
(`pipeline.records.paths`): no truncated text, no desirable text with a false
equation or a low step value (the process gates), no self-correction trace, no
near duplicate, and no undesirable text that states the reference.  An answered
trajectory whose comparison with the reference was cut off has no label, so it is
neither desirable nor undesirable: it gives no row (``ungraded``).  With
``gates.unpaired_from: mixed`` only problems whose tree holds both right and wrong
answers give rows (``not_mixed``).
"""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.context import BuildContext, Built, Drops, count, note
from pipeline.records.grading import GradedTree
from pipeline.records.paths import GatedPaths, gated, ordered, ungraded_paths
from pipeline.records.schema import (
    ANSWERS_IN_PATH_DOC,
    MESSAGES_TYPE,
    doc_field,
    record_schema,
    shared_fields,
)
from pipeline.records.trajectories import trajectory_columns

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


def kto_rows(graded: GradedTree, context: BuildContext, paths: GatedPaths | None = None) -> Built:
    """`kto` rows: every distinct answered trajectory (best Q first) with its label.

    The same self-correction rule as SFT applies to both labels, so desirable
    rows are the SFT rows before `min_sft_score` and `sft_top_k`.  `paths`: the tree's
    paths judged once for every table (`pipeline.records.paths`).
    """
    config = context.config
    candidates = ordered(graded.answered())
    if config.gates.unpaired_from == "mixed" and graded.difficulty != "mixed":
        # counted under the first gate each fails: ungraded comes before every other
        dropped: Drops = ungraded_paths(graded, "kto")
        count(dropped, "kto.not_mixed", len(candidates) - len(graded.ungraded))
        for n in candidates:
            if n.id not in graded.ungraded:
                note("kto.not_mixed", n.id)
        return Built([], dropped_paths=dropped)
    selected, dropped = gated(graded, context, paths).select(candidates, "kto")
    shared = context.shared_columns(graded, KTO_SCHEMA)
    # `select` lets no ungraded path through: every selected node has its label
    rows = [
        trajectory_columns(graded, n, answers) | {"label": graded.labels[n.id]} | shared
        for n, answers in selected
    ]
    return Built(rows, dropped_paths=dropped)


__all__ = ["KTO_SCHEMA", "kto_rows"]
