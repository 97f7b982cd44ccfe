"""The ``sft`` record: TRL prompt-completion rows from the trajectories labelled correct.

The answered nodes labelled correct (by reference or pseudo label) with
Q >= ``min_score``, best Q first, through the gates (each counts its drops):

* ``truncated``: the token cap cut the node inside its answer sentence
  (`gates.drop_truncated`);
* ``duplicate``: with ``dedupe``, only the best-Q node of identical or near
  duplicate training texts (`gates.near_duplicate`) is kept;
* ``self_correction``: by default only *clean* paths (the node's answer is
  the only one on its path and its text states one answer).  A path that
  answered earlier and went on with the continuation prompt ("But wait, let
  me think about the problem again.") is a self-correction trace; most such
  traces state a wrong answer first, so SFT on them teaches answering wrong
  first.  ``sft.self_correction: include`` keeps them too, ``only`` keeps
  only them;
* ``top_k``: at most `gates.sft_top_k` rows per problem, the best Q
  (rStar-Math keeps 2).

The completion is the training text (`pipeline.records.training_text`): it
ends right after its answer statement.  Nobody in this project reads a
``messages`` column, so there is none: TRL trains on every token of
``messages`` data (SmolLM2's template has no ``{% generation %}`` markers for
``assistant_only_loss``).
"""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.config import GatesConfig, SelfCorrection
from pipeline.records.grading import GradedTree
from pipeline.records.schema import (
    ANSWERS_IN_PATH_DOC,
    DIFFICULTY_FIELD,
    LABEL_SOURCE_FIELD,
    MESSAGES_TYPE,
    PROBLEM_ID_FIELD,
    REFERENCE_FIELD,
    RUN_ID_FIELD,
    SPLIT_FIELD,
    TRUNCATED_FIELD,
    Row,
    doc_field,
    record_schema,
)
from pipeline.records.trajectories import Drops, assistant_turn, count, select_paths, user_turn

SFT_SCHEMA = record_schema(
    "sft",
    [
        doc_field(
            "prompt",
            MESSAGES_TYPE,
            "TRL conversational prompt-completion format: the training user turn (one "
            "message, `records.prompt`; the same in every table)",
        ),
        doc_field(
            "completion",
            MESSAGES_TYPE,
            "one assistant message: the trajectory up to the end of its answer statement "
            "(TRL trains on these tokens only)",
        ),
        PROBLEM_ID_FIELD,
        doc_field("node_id", pa.int64(), "the answered node the trajectory ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("score", pa.float64(), "its PRM score Q"),
        doc_field("depth", pa.int64(), "steps in the trajectory"),
        doc_field("answers_in_path", pa.int64(), ANSWERS_IN_PATH_DOC),
        REFERENCE_FIELD,
        TRUNCATED_FIELD,
        DIFFICULTY_FIELD,
        SPLIT_FIELD,
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
    gates: GatesConfig | None = None,
    drops: Drops | None = None,
) -> list[Row]:
    """`sft` rows from the nodes labelled correct with Q >= `min_score`, best Q first.

    `self_correction` keeps clean paths only (``exclude``: the last node holds
    the path's only answer), every path (``include``), or only the paths that
    answered before (``only``); `gates` (default: `GatesConfig()`) and the
    module docstring say the rest.  `drops` counts what each gate dropped.
    """
    gates = gates or GatesConfig()
    correct = [n for n in graded.answered() if graded.labels[n.id]]
    picked = sorted((n for n in correct if n.q >= min_score), key=lambda n: (-n.q, n.id))
    count(drops, "sft.min_score", len(correct) - len(picked))
    paths = select_paths(
        graded,
        picked,
        dedupe,
        self_correction,
        record="sft",
        gates=gates,
        drops=drops,
    )
    if gates.sft_top_k:
        count(drops, "sft.top_k", len(paths) - gates.sft_top_k)
        paths = paths[: gates.sft_top_k]
    return [
        {
            "prompt": user_turn(graded),
            "completion": assistant_turn(graded.training(n).text),
            "problem_id": graded.problem_id,
            "node_id": n.id,
            "answer": n.answer,
            "score": n.q,
            "depth": n.depth,
            "answers_in_path": answers,
            "reference": graded.reference,
            "truncated": graded.training(n).truncated,
            "difficulty": graded.difficulty,
            "split": graded.split,
            "label_source": graded.label_source,
            "run_id": run_id,
        }
        for n, answers in paths
    ]


__all__ = ["SFT_SCHEMA", "sft_rows"]
